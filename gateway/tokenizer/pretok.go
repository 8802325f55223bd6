package tokenizer

import "github.com/dlclark/regexp2/v2"

// splitter finds the spans a Split pattern matches in s, appending them
// to dst as byte offsets in order. splitWith applies HF's behaviours to
// those spans whichever splitter produced them.
type splitter interface {
	appendSpans(dst [][2]int, s string) ([][2]int, error)
}

// regexSplitter is the general case: any pattern, through regexp2.
type regexSplitter struct{ re *regexp2.Regexp }

func (r regexSplitter) appendSpans(dst [][2]int, s string) ([][2]int, error) {
	locs, err := r.re.FindAllStringIndex(s, -1)
	if err != nil {
		return dst, err
	}
	for _, l := range locs {
		dst = append(dst, [2]int{l[0], l[1]})
	}
	return dst, nil
}
