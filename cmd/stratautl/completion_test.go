package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run([]string{"completion", shell}, &out, &errb); code != 0 {
		t.Fatalf("completion %s: exit %d: %s", shell, code, errb.String())
	}
	return out.String()
}

// TestBashCompletion: bash parses the script, and bash's completion
// function, driven as bash drives it (COMP_WORDS, COMP_CWORD), completes
// commands, sub-commands, flags, flag values and file arguments.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed: %v", err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "stratautl.bash")
	if err := os.WriteFile(script, []byte(completionScript(t, "bash")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(dir, "snap1.db"), nil, 0o600)
	os.WriteFile(filepath.Join(dir, "snap2.db"), nil, 0o600)
	os.Mkdir(filepath.Join(dir, "member.strata"), 0o700)
	cases := []struct {
		words []string // the last is the word being completed
		want  string   // COMPREPLY, sorted, space separated
	}{
		{[]string{"stratautl", "snap"}, "snapshot"},
		{[]string{"stratautl", ""}, "completion db defrag hashkv help migrate snapshot version wal"},
		{[]string{"stratautl", "snapshot", "st"}, "status"},
		{[]string{"stratautl", "snapshot", ""}, "export-etcd restore save status"},
		{[]string{"stratautl", "wal", "d"}, "dump"},
		{[]string{"stratautl", "snapshot", "restore", "--bump"}, "--bump-revision"},
		{[]string{"stratautl", "snapshot", "restore", "snap1.db", "--mark"}, "--mark-compacted"},
		{[]string{"stratautl", "hashkv", "--"}, "--help --rev --timeout --write-out"},
		{[]string{"stratautl", "-w", "j"}, "json"},
		{[]string{"stratautl", "snapshot", "status", "--write-out", ""}, "fields json protobuf simple table"},
		{[]string{"stratautl", "--timeout", "5s", "snapshot", "s"}, "save status"},
		{[]string{"stratautl", "-w", "json", "hashkv", "snap"}, "snap1.db snap2.db"},
		{[]string{"stratautl", "snapshot", "status", "snap"}, "snap1.db snap2.db"},
		{[]string{"stratautl", "defrag", "--data-dir", "mem"}, "member.strata"},
		{[]string{"stratautl", "defrag", "--data-dir", "=", "mem"}, "member.strata"},
		{[]string{"stratautl", "completion", ""}, "bash fish powershell zsh"},
		{[]string{"stratautl", "wal", "dump", "--type", "s"}, "snapshot state"},
		{[]string{"stratautl", "migrate", "--target-version", "3.6", "--f"}, "--force"},
		{[]string{"stratautl", "version", ""}, ""},
	}
	var driver strings.Builder
	driver.WriteString("source " + script + "\n")
	for _, c := range cases {
		driver.WriteString("COMP_WORDS=(")
		for _, w := range c.words {
			driver.WriteString("'" + w + "' ")
		}
		driver.WriteString(")\n")
		driver.WriteString("COMP_CWORD=" + strconv.Itoa(len(c.words)-1) + "\n")
		driver.WriteString("_stratautl\nprintf '%s\\n' \"${COMPREPLY[*]}\"\n")
	}
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", driver.String())
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%d lines of replies for %d cases:\n%s", len(lines), len(cases), out)
	}
	for i, c := range cases {
		got := strings.Fields(lines[i])
		sort.Strings(got)
		if strings.Join(got, " ") != c.want {
			t.Errorf("%q: completes %q, want %q", c.words, strings.Join(got, " "), c.want)
		}
	}
}

// TestOtherCompletions: the zsh, fish and powershell scripts carry every
// command path and every command's flags from the command table, with
// their shells' entry points; where a shell is installed it must parse
// its script.
func TestOtherCompletions(t *testing.T) {
	spec := completionSpec()
	for _, shell := range []string{"zsh", "fish", "powershell"} {
		s := completionScript(t, shell)
		for _, p := range spec.paths {
			for _, w := range spec.subs[p] {
				if !strings.Contains(s, w) {
					t.Errorf("%s: no %q", shell, w)
				}
			}
			for _, f := range spec.flags[p] {
				if !strings.Contains(s, dashed(f.name)) {
					t.Errorf("%s: no %s of %q", shell, dashed(f.name), p)
				}
			}
		}
		entry := map[string]string{
			"zsh":        "#compdef stratautl",
			"fish":       "complete -c stratautl -f -a '(__stratautl_complete)'",
			"powershell": "Register-ArgumentCompleter -Native -CommandName 'stratautl'",
		}[shell]
		if !strings.Contains(s, entry) {
			t.Errorf("%s: no %q", shell, entry)
		}
		bin := map[string]string{"zsh": "zsh", "fish": "fish", "powershell": "pwsh"}[shell]
		if path, err := exec.LookPath(bin); err == nil {
			f := filepath.Join(t.TempDir(), "script")
			os.WriteFile(f, []byte(s), 0o600)
			var cmd *exec.Cmd
			if bin == "pwsh" {
				cmd = exec.Command(path, "-NoProfile", "-Command", "$null = [System.Management.Automation.Language.Parser]::ParseFile('"+f+"', [ref]$null, [ref]$e); if ($e) { $e; exit 1 }")
			} else {
				cmd = exec.Command(path, "-n", f)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s does not parse the %s script: %v\n%s", bin, shell, err, out)
			}
			driveCompletion(t, bin, path, f)
		} else {
			t.Logf("%s not installed: its script checked for content only", bin)
		}
	}
	// Every command is in the table the scripts come from.
	for n := range commands {
		w := strings.Fields(n)
		parent := strings.Join(w[:len(w)-1], " ")
		found := false
		for _, s := range spec.subs[parent] {
			found = found || s == w[len(w)-1]
		}
		if !found {
			t.Errorf("command %q missing from the completion table", n)
		}
	}
}

// driveCompletion asks an installed zsh or fish for completions with the
// script loaded: fish through its own 'complete -C', zsh by calling the
// completion function with compadd and _files replaced by printers.
func driveCompletion(t *testing.T, bin, path, script string) {
	cases := []struct{ line, want string }{
		{"stratautl snap", "snapshot"},
		{"stratautl snapshot restore --mark", "--mark-compacted"},
		{"stratautl -w j", "json"},
		{"stratautl --timeout 5s wal d", "dump"},
		{"stratautl completion z", "zsh"},
	}
	for _, c := range cases {
		var cmd *exec.Cmd
		switch bin {
		case "fish":
			cmd = exec.Command(path, "--no-config", "-c", "source "+script+"; complete -C'"+c.line+"'")
		case "zsh":
			words := strings.Fields(c.line)
			var q []string
			for _, w := range words {
				q = append(q, "'"+w+"'")
			}
			cmd = exec.Command(path, "-f", "-c", `compdef() { :; }; compadd() { shift; for w in "$@"; do [[ "$w" == "$words[CURRENT]"* ]] && print -r -- "$w"; done }; _files() { :; }; source `+
				script+`; words=(`+strings.Join(q, " ")+`); CURRENT=$#words; _stratautl; true`)
		default:
			return
		}
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("%s completes %q to %q (%v), want %q", bin, c.line, out, err, c.want)
		}
	}
}
