package main

import (
	"fmt"
	"io"
	"strings"
)

// counts is one part's tally.
type counts struct{ total, pass, fail, timeout, skip int }

func (c *counts) add(r string) {
	c.total++
	switch r {
	case resPass:
		c.pass++
	case resFail:
		c.fail++
	case resTimeout:
		c.timeout++
	case resSkip:
		c.skip++
	}
}

// mustPassFailed lists the must-pass tests that did not pass (a skip is not
// a pass: a missing prerequisite fails the run).
func mustPassFailed(rs []result) []string {
	var out []string
	for _, r := range rs {
		if r.Part == partMustPass && r.Result != resPass {
			out = append(out, r.Name)
		}
	}
	return out
}

// printTable writes the table of every test run, then each failure's
// first assertion, then the counts per part.
func printTable(w io.Writer, rs []result, target string) {
	width := len("TEST")
	for _, r := range rs {
		width = max(width, len(r.Name))
	}
	fmt.Fprintf(w, "\netcd tests/e2e against %s:\n\n", target)
	fmt.Fprintf(w, "%-*s  %-14s  %-7s  %7s\n", width, "TEST", "PART", "RESULT", "SECONDS")
	for _, r := range rs {
		fmt.Fprintf(w, "%-*s  %-14s  %-7s  %7.1f\n", width, r.Name, r.Part, r.Result, r.Secs)
	}

	first := true
	for _, r := range rs {
		if r.Result == resPass {
			continue
		}
		if first {
			fmt.Fprintf(w, "\nFirst assertion of each test that did not pass:\n")
			first = false
		}
		fmt.Fprintf(w, "\n%s (%s, %s, %.1fs; log %s)\n    %s\n", r.Name, r.Part, r.Result, r.Secs, r.Log, oneLine(r.First, 600))
		if r.Part != partMustPass && r.Reason != "" {
			fmt.Fprintf(w, "    listed as %s: %s\n", r.Part, r.Reason)
		}
	}

	first = true
	for _, r := range rs {
		if r.Result == resPass && r.Note != "" {
			if first {
				fmt.Fprintf(w, "\nPassed, with a note:\n")
				first = false
			}
			fmt.Fprintf(w, "  %s: %s\n", r.Name, r.Note)
		}
	}

	per := map[string]*counts{}
	var all counts
	for _, r := range rs {
		if per[r.Part] == nil {
			per[r.Part] = &counts{}
		}
		per[r.Part].add(r.Result)
		all.add(r.Result)
	}
	fmt.Fprintf(w, "\n%-14s  %5s  %5s  %5s  %7s  %5s\n", "PART", "TESTS", "PASS", "FAIL", "TIMEOUT", "SKIP")
	for _, p := range partOrder {
		if c := per[p]; c != nil {
			fmt.Fprintf(w, "%-14s  %5d  %5d  %5d  %7d  %5d\n", p, c.total, c.pass, c.fail, c.timeout, c.skip)
		}
	}
	fmt.Fprintf(w, "%-14s  %5d  %5d  %5d  %7d  %5d\n", "total", all.total, all.pass, all.fail, all.timeout, all.skip)

	var moved []string
	for _, r := range rs {
		if r.Part != partMustPass && r.Result == resPass {
			moved = append(moved, r.Name+" ("+r.Part+")")
		}
	}
	if len(moved) > 0 {
		fmt.Fprintf(w, "\nPassed although not listed as must-pass (move them?): %s\n", strings.Join(moved, ", "))
	}
}

// oneLine flattens s and cuts it at n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + " ..."
	}
	return s
}

// writeTSV writes one line per test: name, part, result, seconds, first
// assertion (for comparing runs with other tools).
func writeTSV(w io.Writer, rs []result) {
	fmt.Fprintf(w, "test\tpart\tresult\tseconds\tfirst\n")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%.1f\t%s\n", r.Name, r.Part, r.Result, r.Secs, oneLine(strings.ReplaceAll(r.First, "\t", " "), 2000))
	}
}
