#!/usr/bin/env python3
# Writes docs/grafana/tsd.json, the Grafana dashboard over the series of
# docs/metrics.md (run from the repo root: python3 scripts/grafana-dashboard.py).
# cmd/tsd/metrics_doc_test.go checks every query reads a series tsd exports.
import json
DS={"type":"prometheus","uid":"${DS_PROMETHEUS}"}
F='{instance=~"$instance"}'
def sel(extra=""):
    return '{instance=~"$instance",'+extra+'}' if extra else F
RI='[$__rate_interval]'
INPUT=sel('token_type="input"')
NOTDECODE=sel('stage!="decode"')
NOTREADY=sel('state!="ready"')
panels=[]
pid=[0]; y=[0]; x=[0]
def row(title):
    pid[0]+=1
    panels.append({"type":"row","title":title,"id":pid[0],"collapsed":False,"gridPos":{"h":1,"w":24,"x":0,"y":y[0]},"panels":[]})
    y[0]+=1
def panel(title, targets, unit="short", kind="timeseries", w=8, h=8, desc="", stack=False, extra=None):
    pid[0]+=1
    p={"type":kind,"title":title,"id":pid[0],"datasource":DS,"description":desc,
       "gridPos":{"h":h,"w":w,"x":x[0],"y":y[0]},
       "fieldConfig":{"defaults":{"unit":unit},"overrides":[]},
       "options":{"legend":{"displayMode":"list","placement":"bottom","showLegend":True},"tooltip":{"mode":"multi","sort":"desc"}},
       "targets":[{"datasource":DS,"refId":chr(65+i),"expr":e,"legendFormat":l} for i,(e,l) in enumerate(targets)]}
    if kind=="timeseries":
        p["fieldConfig"]["defaults"]["custom"]={"drawStyle":"line","lineWidth":1,"fillOpacity":60 if stack else 10,"stacking":{"mode":"normal" if stack else "none","group":"A"}}
    if extra: p.update(extra)
    panels.append(p)
    x[0]+=w
def endrow(h=8):
    x[0]=0; y[0]+=h
q=lambda v: "p"+str(int(round(v*100)))

row("Traffic")
panel("Requests / s", [('sum(rate(tsd_gateway_traffic_requests_total'+F+RI+'))',"requests"),
                       ('sum(rate(tsd_gateway_traffic_errors_total'+F+RI+'))',"deployment errors (5xx, broken streams)"),
                       ('sum(rate(tsd_gateway_traffic_client_errors_total'+F+RI+'))',"client errors (4xx)")], "reqps",
      desc="Every POST once (the dashboard's count). Client 4xx are counted apart from the deployment's errors.")
panel("Deployment error ratio", [('sum(rate(tsd_gateway_traffic_errors_total'+F+RI+')) / clamp_min(sum(rate(tsd_gateway_traffic_requests_total'+F+RI+')), 1e-9)',"5xx + broken streams")], "percentunit")
panel("Tokens / s", [('sum(rate(tsd_gateway_traffic_output_tokens_total'+F+RI+'))',"output"),
                     ('sum(rate(smg_router_tokens_total'+INPUT+RI+'))',"prompt")], "short")
endrow()
panel("In flight and queued", [('sum(tsd_gateway_traffic_requests_in_flight'+F+')',"in flight"),('sum(tsd_gateway_requests_queued'+F+')',"queued")], "short")
panel("Shed / s by reason", [('sum by (reason) (rate(smg_admission_queue_rejected_total'+F+RI+'))',"{{reason}}")], "reqps",
      desc="Requests answered at once with 429/503 and Retry-After for want of room.")
panel("Attempt failures / s", [('sum by (failure, verdict) (rate(tsd_gateway_attempt_failures_total'+F+RI+'))',"{{failure}} → {{verdict}}")], "reqps")
endrow()

row("Where the time goes")
panel("TTFT", [('histogram_quantile(%g, sum by (le) (rate(smg_router_ttft_seconds_bucket'%v+F+RI+')))',q(v)) for v in (0.5,0.9,0.99)], "s")
panel("Inter-token latency", [('histogram_quantile(%g, sum by (le) (rate(smg_router_tpot_seconds_bucket'%v+F+RI+')))',q(v)) for v in (0.5,0.9,0.99)], "s")
panel("p90 by stage", [('histogram_quantile(0.9, sum by (stage, le) (rate(smg_router_stage_duration_seconds_bucket'+F+RI+')))',"{{stage}}")], "s",
      desc="queued, tokenize, route, encode (EPD), prefill, kv_transfer, write (first byte), decode: docs/protocol.md §11.10.")
endrow()
panel("Mean time per request by stage", [('sum by (stage) (rate(smg_router_stage_duration_seconds_sum'+NOTDECODE+RI+')) / scalar(sum(rate(tsd_gateway_traffic_requests_total'+F+RI+')))',"{{stage}}")], "s", stack=True,
      desc="Stacked: what a request's time to first token is made of, on average (decode left out).")
panel("PD prefill and KV transfer (p90)", [('histogram_quantile(0.9, sum by (le) (rate(smg_pd_prefill_duration_seconds_bucket'+F+RI+')))',"prefill"),
                                           ('histogram_quantile(0.9, sum by (le) (rate(smg_pd_kv_transfer_duration_seconds_bucket'+F+RI+')))',"kv transfer"),
                                           ('histogram_quantile(0.9, sum by (le) (rate(smg_pd_ttft_seconds_bucket'+F+RI+')))',"pd ttft")], "s")
panel("The gateway's own share of TTFT", [('histogram_quantile(%g, sum by (le) (rate(tsd_gateway_added_ttft_seconds_bucket'%v+F+RI+')))',q(v)) for v in (0.5,0.99)], "s")
endrow()

row("Roles")
panel("Role state", [('max by (role, state) (tsd_role_state'+F+') == 1',"{{role}}: {{state}}")], "short", kind="state-timeline", w=12,
      extra={"options":{"showValue":"never","mergeValues":True,"rowHeight":0.9,"legend":{"showLegend":False}}})
panel("Roles not ready", [('count by (state) (tsd_role_state'+NOTREADY+' == 1)',"{{state}}")], "short", w=12)
endrow()
panel("Restarts (1 h)", [('increase(tsd_role_restarts_total'+F+'[1h])',"{{role}}")], "short")
panel("Exits by reason (1 h)", [('sum by (role, reason) (increase(tsd_role_exits_total'+F+'[1h])) > 0',"{{role}} {{reason}}")], "short")
panel("Uptime", [('tsd_role_uptime_seconds'+F,"{{role}}"),('max(tsd_uptime_seconds'+F+')',"tsd")], "s")
endrow()
panel("Requests / s by role", [('sum by (role) (rate(tsd_gateway_role_requests_total'+F+RI+'))',"{{role}}")], "reqps")
panel("Errors / s by role", [('sum by (role) (rate(tsd_gateway_role_errors_total'+F+RI+'))',"{{role}}"),
                             ('sum by (role) (rate(tsd_gateway_role_client_errors_total'+F+RI+'))',"{{role}} (client)")], "reqps")
panel("TTFT p90 by role", [('histogram_quantile(0.9, sum by (role, le) (rate(tsd_gateway_role_ttft_seconds_bucket'+F+RI+')))',"{{role}}")], "s")
endrow()

row("Workers and routing")
panel("Circuit breakers (0 closed, 1 open, 2 half-open)", [('max by (worker) (smg_worker_cb_state'+F+')',"{{worker}}")], "short")
panel("Worker health", [('min by (worker) (smg_worker_health'+F+')',"{{worker}}")], "short")
panel("Engine ranks by state", [('sum by (state) (tsd_worker_ranks'+F+')',"{{state}}")], "short", stack=True)
endrow()
panel("Route decisions / s", [('sum by (kind, policy, reason) (rate(tsd_gateway_route_decisions_total'+F+RI+'))',"{{kind}} {{policy}} {{reason}}"),
                             ('sum by (layout, reason) (rate(tsd_gateway_layout_routes_total'+F+RI+'))',"layout {{layout}}: {{reason}}")], "reqps")
panel("Prefix cache hit share", [('tsd_gateway_prefill_cached_share'+F,"{{role}} dp{{dp_rank}}")], "percentunit")
panel("Legs in flight per worker", [('sum by (worker) (smg_worker_requests_active'+F+')',"{{worker}}")], "short")
endrow()

row("GPUs and processes")
panel("GPU utilisation", [('tsd_gpu_utilization_percent'+F,"gpu {{gpu}}")], "percent")
panel("GPU memory used", [('tsd_gpu_memory_used_bytes'+F,"gpu {{gpu}}")], "bytes")
panel("Role CPU", [('tsd_role_cpu_percent'+F,"{{role}}")], "percent")
endrow()
panel("Role RSS", [('tsd_role_rss_bytes'+F,"{{role}}")], "bytes")
panel("tsd's own memory and goroutines", [('process_resident_memory_bytes'+F,"RSS"),('go_goroutines'+F,"goroutines")], "short")
panel("Trace exports failed / s", [('rate(tsd_gateway_trace_export_errors_total'+F+RI+')',"failed exports")], "short",
      desc="gateway.tracing: exports to the OTLP collector that failed (their spans are dropped).")
endrow()

dash={
 "__inputs":[{"name":"DS_PROMETHEUS","label":"Prometheus","description":"The Prometheus that scrapes tsd's /metrics","type":"datasource","pluginId":"prometheus","pluginName":"Prometheus"}],
 "__requires":[{"type":"grafana","id":"grafana","name":"Grafana","version":"10.0.0"},{"type":"datasource","id":"prometheus","name":"Prometheus","version":"1.0.0"}],
 "title":"tsd","uid":"tsd-deployment","description":"A tsd deployment: traffic, where each request's time goes, role states and restarts, workers, GPUs (docs/metrics.md).",
 "tags":["tsd","tokenspeed","smg"],"timezone":"browser","schemaVersion":39,"version":1,"editable":True,
 "time":{"from":"now-1h","to":"now"},"refresh":"30s",
 "templating":{"list":[
   {"name":"instance","type":"query","datasource":DS,"label":"tsd","query":{"query":"label_values(tsd_uptime_seconds, instance)","refId":"instance"},
    "definition":"label_values(tsd_uptime_seconds, instance)","includeAll":True,"multi":True,"refresh":2,"current":{}}]},
 "annotations":{"list":[]},
 "panels":panels}
open('docs/grafana/tsd.json','w').write(json.dumps(dash,indent=2, ensure_ascii=False)+"\n")
print(len(panels))
