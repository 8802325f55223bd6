# check.py EXPR FILE: exit 0 when EXPR holds for the status JSON in FILE.
# EXPR sees r (roles by name), g (GPU list), s (whole snapshot), mem (bool).
import json, os, sys
try:
    s = json.load(open(sys.argv[2]))
except Exception:
    sys.exit(1)
r = {x["name"]: x for x in s.get("roles", [])}
g = s.get("gpus") or []
mem = os.environ.get("NOMEM") != "1"
sys.exit(0 if eval(sys.argv[1]) else 1)
