package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// genEvent is one event of a streaming /generate answer: the fields the
// driver's clients read.
type genEvent struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		FinishReason *struct{ Type string } `json:"finish_reason"`
		CachedTokens int                    `json:"cached_tokens"`
	} `json:"meta_info"`
	Error *struct{ Message string } `json:"error"`
}

// readGenerate reads a streaming /generate answer, handing each event to
// each as it arrives. A status other than 200 is an error (the status and
// the body's first line), and so is an event that does not parse or that
// carries an error; finished says whether an event brought a finish
// reason.
func readGenerate(resp *http.Response, each func(ev genEvent)) (finished bool, err error) {
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return false, fmt.Errorf("%d %s", resp.StatusCode, firstLine(string(b)))
	}
	sseData(resp.Body, func(data string) bool {
		var ev genEvent
		if jerr := json.Unmarshal([]byte(data), &ev); jerr != nil {
			err = errors.New("bad event: " + jerr.Error())
			return false
		}
		if ev.Error != nil {
			err = errors.New(ev.Error.Message)
			return false
		}
		each(ev)
		finished = finished || ev.MetaInfo.FinishReason != nil
		return true
	})
	if err != nil {
		return false, err
	}
	return finished, nil
}

// sseData hands each data line of an SSE stream (the text after "data: ";
// the closing [DONE] left out) to each, until each returns false or the
// stream ends.
func sseData(r io.Reader, each func(data string) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		if !each(data) {
			return
		}
	}
}
