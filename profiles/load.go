package profiles

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Load reads, defaults and validates the profile at path. It returns every
// problem it finds (not just the first), each naming file:line:col and the
// key path. The Profile is nil when the file could not be read or parsed;
// otherwise it is returned even with errors so callers can show partial
// results.
func Load(path string) (*Profile, Errors) {
	data, err := readProfile(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("read profile: %v", err)}}
	}
	return Parse(path, data)
}

// Parse is Load on bytes already read; path names the file in errors and
// anchors relative paths. It touches the filesystem only to resolve relative
// model/tokenizer paths (docs/architecture.md).
func Parse(path string, data []byte) (*Profile, Errors) {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = filepath.Clean(path)
	}
	if e := checkLimits(path, data); e != nil {
		return nil, Errors{e}
	}
	l := &loader{file: path, pos: map[string]Pos{}, anchors: map[string]ast.Node{}}
	f, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			e := &Error{File: path, Msg: "YAML: " + ye.GetMessage()}
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				e.Pos = Pos{tk.Position.Line, tk.Position.Column}
			}
			e.Msg += yamlHint(data, ye.GetMessage(), e.Pos.Line)
			return nil, Errors{e}
		}
		return nil, Errors{{File: path, Msg: "YAML: " + err.Error() + yamlHint(data, err.Error(), 0)}}
	}
	var body ast.Node
	docs := 0
	for _, d := range f.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		docs++
		if body == nil {
			body = d.Body
		}
	}
	if docs > 1 {
		l.errAt(Pos{}, "", "the file holds %d YAML documents; a profile is one", docs)
	}
	if body == nil {
		return nil, Errors{{File: path, Msg: "the profile is empty: it needs at least `model` and `roles`"}}
	}
	p := &Profile{Path: path, Abs: abs, Dir: filepath.Dir(abs), pos: l.pos}
	l.pos[""] = Pos{1, 1}
	topSection.setDefaults(p)
	topSection.read(l, field{n: body, pos: nodePos(body)}, p)
	l.validate(p)
	return p, l.errs.sorted()
}

// yamlHint is what usually causes a YAML syntax error, said after the
// parser's own words: a tab in a line's indentation (YAML indents with
// spaces only), else, for an error about the document's structure, the
// indentation near the line.
func yamlHint(data []byte, msg string, line int) string {
	for i, l := range bytes.Split(data, []byte("\n")) {
		lead := l[:len(l)-len(bytes.TrimLeft(l, " \t"))]
		if bytes.IndexByte(lead, '\t') >= 0 {
			return fmt.Sprintf(" (hint: line %d is indented with a tab; YAML indents with spaces only)", i+1)
		}
	}
	if strings.Contains(msg, "quoted") || strings.Contains(msg, "quote") {
		return ""
	}
	near := ""
	if line > 1 {
		near = fmt.Sprintf(" near line %d", line)
	}
	return fmt.Sprintf(" (hint: check the indentation%s: the keys of one mapping start in the same column, with spaces, and a list item's keys line up after its \"- \")", near)
}

type loader struct {
	file    string
	errs    Errors
	pos     map[string]Pos
	anchors map[string]ast.Node
}

// field is one key of a mapping as written.
type field struct {
	n    ast.Node
	pos  Pos
	path string
}

func (l *loader) errAt(p Pos, key, format string, args ...any) {
	l.errs = append(l.errs, &Error{File: l.file, Pos: p, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) errf(f field, format string, args ...any) {
	l.errAt(f.pos, f.path, format, args...)
}

func nodePos(n ast.Node) Pos {
	if n == nil {
		return Pos{}
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return Pos{}
	}
	return Pos{tk.Position.Line, tk.Position.Column}
}

// deref strips anchors and tags and follows aliases, so the schema code only
// sees mappings, sequences and scalars.
func (l *loader) deref(n ast.Node) ast.Node {
	for i := 0; i < 64 && n != nil; i++ {
		switch v := n.(type) {
		case *ast.AnchorNode:
			if name := scalarText(v.Name); name != "" {
				l.anchors[name] = v.Value
			}
			n = v.Value
		case *ast.TagNode:
			n = v.Value
		case *ast.AliasNode:
			name := scalarText(v.Value)
			t, ok := l.anchors[name]
			if !ok {
				return nil
			}
			n = t
		case *ast.MappingKeyNode:
			n = v.Value
		default:
			return n
		}
	}
	return nil
}

func isNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
}

// scalarText is the text of a scalar as the user means it: the unquoted
// string, or the literal text of a number or boolean.
func scalarText(n ast.Node) string {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value
	case *ast.LiteralNode:
		if v.Value != nil {
			return v.Value.Value
		}
	case *ast.NullNode:
		return ""
	case nil:
		return ""
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

func isScalar(n ast.Node) bool {
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode,
		*ast.InfinityNode, *ast.NanNode:
		return true
	}
	return false
}

// entries lists a mapping's key/value pairs, expanding `<<` merge keys
// (explicit keys win over merged ones).
func (l *loader) entries(n ast.Node, depth int) ([]*ast.MappingValueNode, bool) {
	if depth > 8 {
		return nil, false
	}
	var vals []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		vals = v.Values
	case *ast.MappingValueNode:
		vals = []*ast.MappingValueNode{v}
	default:
		return nil, false
	}
	var own, merged []*ast.MappingValueNode
	for _, mv := range vals {
		if mv == nil || mv.Key == nil {
			continue
		}
		if mv.Key.IsMergeKey() {
			srcs := []ast.Node{l.deref(mv.Value)}
			if seq, ok := srcs[0].(*ast.SequenceNode); ok {
				srcs = srcs[:0]
				for _, s := range seq.Values {
					srcs = append(srcs, l.deref(s))
				}
			}
			for _, s := range srcs {
				es, ok := l.entries(s, depth+1)
				if !ok {
					l.errAt(nodePos(mv.Key), "<<", "a merge key needs a mapping (or a list of mappings)")
					continue
				}
				merged = append(merged, es...)
			}
			continue
		}
		own = append(own, mv)
	}
	if len(merged) == 0 {
		return own, true
	}
	seen := map[string]bool{}
	for _, mv := range own {
		seen[scalarText(l.deref(mv.Key))] = true
	}
	out := own
	for _, mv := range merged {
		k := scalarText(l.deref(mv.Key))
		if !seen[k] {
			seen[k] = true
			out = append(out, mv)
		}
	}
	return out, true
}

// mapping reads a mapping whose keys must be among allowed. Unknown and
// duplicate keys are errors; a null value reads as an empty mapping.
func (l *loader) mapping(n ast.Node, at field, allowed []string) (map[string]field, bool) {
	n = l.deref(n)
	out := map[string]field{}
	if isNull(n) {
		return out, true
	}
	es, ok := l.entries(n, 0)
	if !ok {
		l.errf(at, "must be a mapping of %s", strings.Join(allowed, ", "))
		return out, false
	}
	for _, mv := range es {
		k := scalarText(l.deref(mv.Key))
		kp := nodePos(mv.Key)
		path := joinKey(at.path, k)
		if !contains(allowed, k) {
			l.errAt(kp, path, "unknown key%s", didYouMean(k, allowed))
			continue
		}
		if prev, dup := out[k]; dup {
			l.errAt(kp, path, "duplicate key (first at line %d)", prev.pos.Line)
			continue
		}
		f := field{n: l.deref(mv.Value), pos: kp, path: path}
		out[k] = f
		l.pos[path] = kp
	}
	return out, true
}

// stringMap reads a mapping of free-form keys to scalar values (env).
func (l *loader) stringMap(f field) map[string]string {
	n := f.n
	if isNull(n) {
		return nil
	}
	es, ok := l.entries(n, 0)
	if !ok {
		l.errf(f, "must be a mapping of NAME: value")
		return nil
	}
	out := map[string]string{}
	for _, mv := range es {
		k := scalarText(l.deref(mv.Key))
		kp := nodePos(mv.Key)
		path := joinKey(f.path, k)
		if !envName.MatchString(k) {
			l.errAt(kp, path, "%q is not a valid environment variable name", k)
			continue
		}
		if _, dup := out[k]; dup {
			l.errAt(kp, path, "duplicate key (first at line %d)", l.pos[path].Line)
			continue
		}
		v := l.deref(mv.Value)
		if !isNull(v) && !isScalar(v) {
			l.errAt(kp, path, "an environment value must be a string")
			continue
		}
		out[k] = scalarText(v)
		l.pos[path] = kp
	}
	return out
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func joinKey(parent, k string) string {
	if parent == "" {
		return k
	}
	return parent + "." + k
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (l *loader) str(f field) string {
	if isNull(f.n) {
		return ""
	}
	if !isScalar(f.n) {
		l.errf(f, "must be a string")
		return ""
	}
	return scalarText(f.n)
}

// intv reads an integer in [lo, hi].
func (l *loader) intv(f field, lo, hi int) (int, bool) {
	iv, ok := f.n.(*ast.IntegerNode)
	if !ok {
		if isScalar(f.n) {
			if n, err := strconv.Atoi(scalarText(f.n)); err == nil {
				if n < lo || n > hi {
					l.errf(f, "must be between %d and %d, got %d", lo, hi, n)
					return 0, false
				}
				return n, true
			}
		}
		l.errf(f, "must be an integer")
		return 0, false
	}
	var n int64
	switch v := iv.Value.(type) {
	case int64:
		n = v
	case uint64:
		if v > math.MaxInt32 {
			n = math.MaxInt32
		} else {
			n = int64(v)
		}
	default:
		l.errf(f, "must be an integer")
		return 0, false
	}
	if n < int64(lo) || n > int64(hi) {
		l.errf(f, "must be between %d and %d, got %d", lo, hi, n)
		return 0, false
	}
	return int(n), true
}

// floatv reads a number in (lo, hi].
func (l *loader) floatv(f field, lo, hi float64) (float64, bool) {
	if !isScalar(f.n) {
		l.errf(f, "must be a number")
		return 0, false
	}
	v, err := strconv.ParseFloat(scalarText(f.n), 64)
	if err != nil || math.IsNaN(v) {
		l.errf(f, "must be a number, got %q", scalarText(f.n))
		return 0, false
	}
	if v <= lo || v > hi {
		l.errf(f, "must be greater than %g and at most %g, got %g", lo, hi, v)
		return 0, false
	}
	return v, true
}

func (l *loader) strList(f field) ([]string, bool) {
	if isNull(f.n) {
		return nil, true
	}
	seq, ok := f.n.(*ast.SequenceNode)
	if !ok {
		l.errf(f, "must be a list, e.g. [--flag, value]")
		return nil, false
	}
	out := make([]string, 0, len(seq.Values))
	good := true
	for i, it := range seq.Values {
		it = l.deref(it)
		if !isScalar(it) {
			l.errAt(nodePos(it), fmt.Sprintf("%s[%d]", f.path, i), "must be a string")
			good = false
			continue
		}
		out = append(out, scalarText(it))
	}
	return out, good
}

// boolv reads true or false; YAML 1.1 spellings like yes/on are refused
// rather than guessed.
func (l *loader) boolv(f field) (bool, bool) {
	if isNull(f.n) {
		return false, false // an empty value keeps the default, as for strings
	}
	b, ok := f.n.(*ast.BoolNode)
	if !ok {
		l.errf(f, "must be true or false, got %q", scalarText(f.n))
		return false, false
	}
	return b.Value, true
}

func (l *loader) duration(f field) (time.Duration, bool) {
	s := l.str(f)
	if s == "" {
		l.errf(f, "must be a duration like 2s or 10m")
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		hint := ""
		if _, err2 := strconv.Atoi(s); err2 == nil {
			hint = fmt.Sprintf(" (write %ss for seconds)", s)
		}
		l.errf(f, "%q is not a duration like 2s or 10m%s", s, hint)
		return 0, false
	}
	if d <= 0 {
		l.errf(f, "must be positive, got %s", s)
		return 0, false
	}
	return d, true
}

var budgetRe = regexp.MustCompile(`^\s*(\d+)\s+in\s+(\S+)\s*$`)

// checkEnv refuses variables that the plan owns.
func (l *loader) checkEnv(f field, env map[string]string) {
	for _, name := range []string{"CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"} {
		if _, ok := env[name]; ok {
			kf := field{pos: l.pos[joinKey(f.path, name)], path: joinKey(f.path, name)}
			l.errf(kf, "is set from each role's gpus; remove it here")
		}
	}
	if _, ok := env["ENABLE_CP"]; ok {
		kf := field{pos: l.pos[joinKey(f.path, "ENABLE_CP")], path: joinKey(f.path, "ENABLE_CP")}
		l.errf(kf, "turns attention TP into context parallelism, which TokenSpeed refuses for PD roles and which changes the rank layout tsd plans; remove it")
	}
}

var instanceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func (l *loader) portValue(f field) (any, bool) {
	return l.intv(f, 1, 65535)
}

func replicaKey(path string, i, replicas int) string {
	if replicas > 1 {
		return fmt.Sprintf("%s[%d]", path, i)
	}
	return path
}

// perReplica reads a key that takes one value per replica: a scalar when
// replicas is 1, a list of exactly `replicas` values otherwise.
func (l *loader) perReplica(f field, replicas int, key string, read func(field) (any, bool)) []any {
	out := make([]any, replicas)
	if isNull(f.n) {
		return out
	}
	if replicas == 1 {
		if seq, ok := f.n.(*ast.SequenceNode); ok && len(seq.Values) == 1 {
			f.n = l.deref(seq.Values[0])
		}
		if v, ok := read(f); ok {
			out[0] = v
		}
		return out
	}
	seq, ok := f.n.(*ast.SequenceNode)
	if !ok || len(seq.Values) != replicas {
		l.errf(f, "replicas is %d, so %s needs a list of %d values, one per replica", replicas, key, replicas)
		return out
	}
	for i, it := range seq.Values {
		it = l.deref(it)
		ef := field{n: it, pos: nodePos(it), path: fmt.Sprintf("%s[%d]", f.path, i)}
		l.pos[ef.path] = ef.pos
		if v, ok := read(ef); ok {
			out[i] = v
		}
	}
	return out
}

func (l *loader) gpus(f field, replicas int) [][]string {
	seq, ok := f.n.(*ast.SequenceNode)
	if !ok {
		if isScalar(f.n) && replicas == 1 {
			if g, ok := l.gpu(f); ok {
				return [][]string{{g}}
			}
			return nil
		}
		l.errf(f, "must be a list of GPU indices or UUIDs, e.g. [0, 1]")
		return nil
	}
	nested := len(seq.Values) > 0
	for _, it := range seq.Values {
		if _, ok := l.deref(it).(*ast.SequenceNode); !ok {
			nested = false
		}
	}
	if replicas > 1 && !nested {
		l.errf(f, "replicas is %d, so gpus needs one list per replica, e.g. [[2], [3]]", replicas)
		return nil
	}
	if !nested {
		return [][]string{l.gpuList(f)}
	}
	if len(seq.Values) != replicas {
		l.errf(f, "has %d GPU lists but replicas is %d", len(seq.Values), replicas)
		return nil
	}
	out := make([][]string, 0, replicas)
	for i, it := range seq.Values {
		ef := field{n: l.deref(it), pos: nodePos(it), path: fmt.Sprintf("%s[%d]", f.path, i)}
		l.pos[ef.path] = ef.pos
		out = append(out, l.gpuList(ef))
	}
	return out
}

func (l *loader) gpuList(f field) []string {
	seq := f.n.(*ast.SequenceNode)
	out := make([]string, 0, len(seq.Values))
	for i, it := range seq.Values {
		ef := field{n: l.deref(it), pos: nodePos(it), path: fmt.Sprintf("%s[%d]", f.path, i)}
		if g, ok := l.gpu(ef); ok {
			out = append(out, g)
		}
	}
	return out
}

var gpuUUID = regexp.MustCompile(`^(GPU|MIG)-[A-Za-z0-9/-]+$`)

func (l *loader) gpu(f field) (string, bool) {
	switch v := f.n.(type) {
	case *ast.IntegerNode:
		n, ok := l.intv(f, 0, 1023)
		return strconv.Itoa(n), ok
	case *ast.StringNode:
		s := strings.TrimSpace(v.Value)
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && n < 1024 {
			return strconv.Itoa(n), true
		}
		if gpuUUID.MatchString(s) {
			return s, true
		}
		if strings.Contains(s, ",") {
			l.errf(f, "%q: write a list, e.g. [%s]", s, s)
			return "", false
		}
		l.errf(f, "%q is neither a GPU index nor a GPU-/MIG- UUID", s)
		return "", false
	}
	l.errf(f, "must be a GPU index or UUID")
	return "", false
}

// checkWorker applies the rules of a worker URL that need no plan.
func (l *loader) checkWorker(f field, r *Role, url string) {
	w, err := ParseWorker(url)
	if err != nil {
		l.errf(f, "%v", err)
		return
	}
	if w.Scheme == "ipc" && !r.Local() {
		l.errf(f, "role runs on host %q, so its worker must be tcp://HOST:PORT (an ipc socket is same-host only)", r.Host)
	}
}

// resolvePath makes a profile path absolute against the profile's
// directory. Directories tsd owns (always=true) always resolve; model and
// tokenizer resolve when they look like paths (./, ../, ~/) or exist there,
// so model ids such as Qwen/Qwen3-8B pass through unchanged.
func resolvePath(dir, v string, always bool) string {
	if v == "" {
		return v
	}
	if v == "~" || strings.HasPrefix(v, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, v[1:])
		}
		return v
	}
	if filepath.IsAbs(v) {
		return filepath.Clean(v)
	}
	j := filepath.Join(dir, v)
	if always || v == "." || v == ".." || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") {
		return j
	}
	if _, err := os.Stat(j); err == nil {
		return j
	}
	return v
}

// plannedFlags are the engine flags the plan emits, with the profile key
// that controls each: a second copy in args would silently win (argparse
// keeps the last), so it is refused.
var plannedFlags = map[string]string{
	"--headless":                        "always set",
	"--model":                           "set it with model:",
	"--model-path":                      "set it with model:",
	"--tp":                              "set it with the role's tp:",
	"--tensor-parallel-size":            "set it with the role's tp:",
	"--data-parallel-size":              "set it with the role's dp:",
	"--disaggregation-mode":             "set it with the role's kind:",
	"--disaggregation-bootstrap-port":   "set it with the role's bootstrap_port:",
	"--disaggregation-transfer-backend": "set it with engine.transfer_backend:",
	"--disaggregation-ib-device":        "set it with engine.ib_device: or the role's ib_device:",
	// Flags that change how many ranks an engine starts, or which devices
	// they take, behind the planner's back (docs/profiles.md): the plan's
	// GPU lists, port clusters and the gateway's expected ranks all follow
	// from tp × dp.
	"--attn-tp-size":           "set it with the role's tp: (--tp is its alias)",
	"--tp-size":                "set it with the role's tp:",
	"--dp":                     "set it with the role's dp:",
	"--dp-size":                "set it with the role's dp:",
	"--world-size":             "it is tp × dp: set the role's tp: and dp:",
	"--nprocs-per-node":        "it is tp × dp on one node: set the role's tp: and dp:",
	"--nnodes":                 "set by tsd from the role's nodes: (--launcher slurm); without Slurm, one role per node with host:",
	"--node-rank":              "set by tsd from the role's nodes: (--launcher slurm); without Slurm, one role per node with host:",
	"--base-gpu-id":            "set the devices with the role's gpus:",
	"--dist-init-addr":         "set it with the role's dist_init_port:",
	"--kv-events-config":       "set it with the role's kv_events: (and kv_events_port:), so the gateway knows where to follow the events",
	"--data-parallel-address":  "set it with the role's worker:",
	"--data-parallel-rpc-port": "set it with the role's worker:",
	"--zmq-engine-index":       "set it with the role's engine_index:",
	// ts serve refuses these with --headless (docs/profiles.md).
	"--engine-startup-timeout":  "ts serve --headless refuses it",
	"--gateway-startup-timeout": "ts serve --headless refuses it",
	"--drain-timeout":           "ts serve --headless refuses it",
	"--control-port":            "ts serve --headless refuses it",
}

// checkArgOwned refuses flag in the args list f when a profile key of the
// same role already sets it.
func (l *loader) checkArgOwned(f field, flag, why string) {
	seq, ok := f.n.(*ast.SequenceNode)
	if !ok {
		return
	}
	for i, it := range seq.Values {
		it = l.deref(it)
		if !isScalar(it) {
			continue
		}
		if name, _, _ := strings.Cut(scalarText(it), "="); name == flag {
			l.errAt(nodePos(it), fmt.Sprintf("%s[%d]", f.path, i), "%s is %s", flag, why)
		}
	}
}

func (l *loader) checkArgs(f field) {
	seq, ok := f.n.(*ast.SequenceNode)
	if !ok {
		return
	}
	for i, it := range seq.Values {
		it = l.deref(it)
		if !isScalar(it) {
			continue
		}
		flag, _, _ := strings.Cut(scalarText(it), "=")
		if why, owned := plannedFlags[flag]; owned {
			l.errAt(nodePos(it), fmt.Sprintf("%s[%d]", f.path, i), "%s is planned by tsd (%s)", flag, why)
		}
	}
}

// CheckImageURLAllow checks one gateway.image_url_allow entry: a host name,
// an IP address or a CIDR prefix.
func CheckImageURLAllow(e string) error {
	if strings.Contains(e, "/") {
		if _, err := netip.ParsePrefix(e); err != nil {
			return fmt.Errorf("image_url_allow entry %q: not a CIDR prefix: %v", e, err)
		}
		return nil
	}
	if _, err := netip.ParseAddr(e); err == nil {
		return nil
	}
	if !hostNameRe.MatchString(e) {
		return fmt.Errorf("image_url_allow entry %q: want a host name, an IP address or a CIDR prefix", e)
	}
	return nil
}

var hostNameRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// CheckCORSOrigin checks one gateway.cors_origins entry: "*" or an origin
// as a browser sends it (scheme://host[:port], no path).
func CheckCORSOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("cors_origins entry %q: want \"*\" or an origin such as https://app.example.com (scheme://host[:port], no path)", o)
	}
	return nil
}
