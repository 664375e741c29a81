package harness

import (
	"fmt"
	"strings"
)

// UnifiedDiff returns a unified diff (3 lines of context) from a to b, or ""
// when they are equal. The common prefix and suffix are trimmed before a
// quadratic LCS on the rest, so long transcripts that differ in a few places
// stay cheap.
func UnifiedDiff(nameA, nameB, a, b string) string {
	if a == b {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	pre := 0
	for pre < len(al) && pre < len(bl) && al[pre] == bl[pre] {
		pre++
	}
	suf := 0
	for suf < len(al)-pre && suf < len(bl)-pre && al[len(al)-1-suf] == bl[len(bl)-1-suf] {
		suf++
	}
	ops := lcsOps(al[pre:len(al)-suf], bl[pre:len(bl)-suf])
	// Full edit script over both texts.
	var script []edit
	for i := 0; i < pre; i++ {
		script = append(script, edit{' ', al[i]})
	}
	script = append(script, ops...)
	for i := len(al) - suf; i < len(al); i++ {
		script = append(script, edit{' ', al[i]})
	}
	return render(nameA, nameB, script, 3)
}

type edit struct {
	op   byte // ' ', '-', '+'
	text string
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// lcsOps is the textbook dynamic-programming LCS, emitting deletions before
// insertions within a changed run.
func lcsOps(a, b []string) []edit {
	n, m := len(a), len(b)
	// l[i][j] = LCS length of a[i:], b[j:].
	l := make([][]int32, n+1)
	for i := range l {
		l[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var out []edit
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, edit{' ', a[i]})
			i++
			j++
		case j >= m || (i < n && l[i+1][j] >= l[i][j+1]):
			out = append(out, edit{'-', a[i]})
			i++
		default:
			out = append(out, edit{'+', b[j]})
			j++
		}
	}
	return out
}

// render groups the edit script into hunks with ctx lines of context.
func render(nameA, nameB string, script []edit, ctx int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", nameA, nameB)
	// Line numbers before each script position.
	an, bn := make([]int, len(script)+1), make([]int, len(script)+1)
	for k, e := range script {
		an[k+1], bn[k+1] = an[k], bn[k]
		if e.op != '+' {
			an[k+1]++
		}
		if e.op != '-' {
			bn[k+1]++
		}
	}
	k := 0
	for k < len(script) {
		if script[k].op == ' ' {
			k++
			continue
		}
		start := max(0, k-ctx)
		end := k
		// Extend the hunk while the next change is within 2*ctx lines.
		for end < len(script) {
			if script[end].op != ' ' {
				end++
				continue
			}
			run := end
			for run < len(script) && script[run].op == ' ' {
				run++
			}
			if run < len(script) && run-end <= 2*ctx {
				end = run
				continue
			}
			end = min(len(script), end+ctx)
			break
		}
		fmt.Fprintf(&sb, "@@ -%d,%d +%d,%d @@\n", an[start]+1, an[end]-an[start], bn[start]+1, bn[end]-bn[start])
		for _, e := range script[start:end] {
			sb.WriteByte(e.op)
			sb.WriteString(e.text)
			sb.WriteByte('\n')
		}
		k = end
	}
	return sb.String()
}
