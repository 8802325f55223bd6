package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/gateway"
	generateapi "github.com/tsd-project/tsd/gateway/generate" // package main's tests have a generate func
	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/gateway/vision"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

type gatewayCmd struct {
	Profile string `arg:"" help:"Profile YAML file."`
	Debug   bool   `help:"Log lane connection events too."`
}

// Run serves the embedded gateway alone, for engines started by hand with
// the commands `tsd plan` prints: bind every socket and rendezvous, serve
// until Ctrl-C, then shut down cleanly (drain, unbind, remove ipc files).
func (c gatewayCmd) Run() error {
	tuneGCForServing()
	_, plan, errs := profiles.LoadPlan(c.Profile, profiles.LocalHostFacts())
	if len(errs) > 0 {
		return profileErrors(errs)
	}
	level := slog.LevelInfo
	if c.Debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	for _, w := range plan.Warnings {
		log.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mount, prompts, problem := frontEnds(plan, log)
	if problem != "" {
		fmt.Fprintln(os.Stderr, red(isTerminal(os.Stderr), "tsd gateway: "+problem))
	}
	g, err := gateway.New(plan, gateway.Options{Logger: log, Mount: mount, TokenizerCache: prompts,
		StallTimeout: plan.Gateway.StallTimeout.D(), QueueTimeout: plan.Gateway.QueueTimeout.D()})
	if err != nil {
		return err
	}
	if err := g.Bind(ctx); err != nil {
		return fmt.Errorf("bind gateway: %w", err)
	}
	// Nobody supervises hand-started engines: treat them as alive so a
	// rendezvous the gateway hosts answers their decode's /health.
	for _, w := range plan.Gateway.Workers {
		g.SetRole(w.Role, snapshot.RoleView{Alive: true, Routed: true})
	}
	for _, w := range g.Lane().Workers() {
		in, out := w.Endpoints()
		log.Info("worker bound", "role", w.Role(), "kind", w.Kind(), "handshake", w.HandshakeEndpoint(), "input", in, "output", out, "bootstrap", w.Plan().Bootstrap)
	}
	log.Info("gateway listening", "url", "http://"+g.Addr(), "mode", plan.Gateway.Mode)

	cur, ranks, cancel := g.SubscribeRanks()
	defer cancel()
	go func() {
		_ = cur // the bound workers were just logged
		for ev := range ranks {
			attrs := []any{"role", ev.Role, "identity", ev.Rank.Identity, "dp_rank", ev.Rank.DPRank, "state", ev.Rank.State}
			if ev.Err != "" {
				log.Warn("rank", append(attrs, "err", ev.Err)...)
				continue
			}
			log.Info("rank", attrs...)
		}
	}()

	serveErr := g.Serve(ctx)
	sctx, done := context.WithTimeout(context.Background(), 15*time.Second)
	defer done()
	if err := g.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	if serveErr != nil {
		return serveErr
	}
	log.Info("gateway stopped")
	return nil
}

// frontEnds mounts the serving routes: /generate always, and
// /v1/chat/completions, /v1/completions and the rest of the OpenAI API
// when the plan's tokenizer loads; without one /generate takes
// input_ids only, and problem says why in words for the screen. The API
// key is the gateway's front door's to check, for the mounted routes too.
// prompts is the prompt cache both front ends encode through
// (gateway.tokenizer_cache_mb), nil without a tokenizer.
func frontEnds(plan *profiles.Plan, log *slog.Logger) (mount func(tokenapi.Engine, *http.ServeMux), prompts *tokenizer.Cache, problem string) {
	dir := tokenizerDir(plan.Tokenizer, plan.Model)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		log.Warn("OpenAI API disabled: tokenizer did not load; /generate still works", "tokenizer", dir, "err", err)
		return func(e tokenapi.Engine, mux *http.ServeMux) { generateapi.New(e, generateapi.Options{}).Register(mux) }, nil,
			fmt.Sprintf("OpenAI API off: tokenizer %s did not load (%v); /generate still works", dir, err)
	}
	prompts = tokenizer.NewCache(tok, int64(plan.Gateway.TokenizerCacheMB)<<20)
	if st := prompts.Stats(); st.Enabled && st.L1Off != "" {
		log.Info("tokenizer cache: whole prompts only (L1 off)", "why", st.L1Off)
	}
	model := plan.ServedModelName
	if model == "" {
		model = plan.Model
	}
	// A vision-language model directory (preprocessor_config.json) takes
	// image parts in chat; the gateway routes them only in epd mode.
	vis, err := vision.Load(plan.Model)
	if err != nil {
		log.Warn("image input disabled: the model's vision config did not load", "model", plan.Model, "err", err)
		vis = nil
	}
	// Remote image URLs are opt-in (gateway.image_urls): fetching one
	// reaches whatever address a client names.
	if vis != nil {
		vis.AllowHTTP = plan.Gateway.ImageURLs
		vis.URLAllow = plan.Gateway.ImageURLAllow
	} else if plan.Gateway.ImageURLs {
		log.Warn("gateway.image_urls is true but the model takes no images", "model", plan.Model)
	}
	// SGLang's /generate tokenizes text as a completion prompt would
	// (special tokens added).
	encode := func(text string) ([]int32, error) { return prompts.Encode(text, true) }
	mount = func(e tokenapi.Engine, mux *http.ServeMux) {
		generateapi.New(e, generateapi.Options{Encode: encode}).Register(mux)
		openai.New(e, tok, openai.Options{Model: model, Vision: vis, TokenizerCache: prompts,
			ToolCallParser: plan.Gateway.ToolCallParser, ReasoningParser: plan.Gateway.ReasoningParser}).Register(mux)
	}
	return mount, prompts, ""
}

// tokenizerDir is where the gateway reads tokenizer.json and the chat
// template: the profile's tokenizer, else its model.
func tokenizerDir(tok, model string) string {
	if tok != "" {
		return tok
	}
	return model
}
