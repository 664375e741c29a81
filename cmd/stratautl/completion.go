package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

func init() {
	register(command{name: "completion", example: "stratautl completion bash > /etc/bash_completion.d/stratautl", args: "bash fish powershell zsh",
		summary: "print a shell completion script (bash, zsh, fish or powershell), as etcdutl completion", run: completionCommand})
}

const completionAbout = `
To load completions:

Bash:
  $ source <(stratautl completion bash)
  # For each new session, once:
  $ stratautl completion bash > /etc/bash_completion.d/stratautl

Zsh:
  # If completion is not enabled yet, once:
  $ echo "autoload -U compinit; compinit" >> ~/.zshrc
  # For each new session, once (then start a new shell):
  $ stratautl completion zsh > "${fpath[1]}/_stratautl"

fish:
  $ stratautl completion fish | source
  # For each new session, once:
  $ stratautl completion fish > ~/.config/fish/completions/stratautl.fish

PowerShell:
  PS> stratautl completion powershell | Out-String | Invoke-Expression
  # For each new session, add that line to your PowerShell profile.

The scripts complete commands, sub-commands, each command's flags, the
values of -w and of flags naming files or directories, and file arguments.
They are generated from stratautl's own command table, so they list
exactly the commands and flags of this binary.
`

func completionCommand(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("completion", "bash|zsh|fish|powershell", []string{
		"stratautl completion bash > /etc/bash_completion.d/stratautl",
		"source <(stratautl completion bash)",
		"stratautl completion zsh > \"${fpath[1]}/_stratautl\"",
		"stratautl completion fish > ~/.config/fish/completions/stratautl.fish",
	}, stderr)
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprint(stderr, completionAbout)
	}
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	spec := completionSpec()
	switch pos[0] {
	case "bash":
		io.WriteString(stdout, bashCompletion(spec))
	case "zsh":
		io.WriteString(stdout, zshCompletion(spec))
	case "fish":
		io.WriteString(stdout, fishCompletion(spec))
	case "powershell":
		io.WriteString(stdout, powershellCompletion(spec))
	default:
		fmt.Fprintf(stderr, "stratautl completion: unknown shell %q: want bash, zsh, fish or powershell\n", pos[0])
		fs.Usage()
		return errUsage
	}
	return nil
}

// compSpec is what the completion scripts know: for each command path
// ("" for stratautl itself, "snapshot", "snapshot status"), its
// sub-commands, its flags with the kind of value each takes, and what its
// positional arguments are.
type compSpec struct {
	paths []string            // every command path, sorted
	subs  map[string][]string // path -> sub-command words
	flags map[string][]compFlag
	args  map[string]string // path -> "file", "dir", "words ...", or ""
}

// compFlag is a flag and its value: "" for a switch, "file", "dir",
// "words a b c" for a fixed set, or "any".
type compFlag struct {
	name  string
	value string
}

// globalCompFlags are etcdutl's global flags, valid on every command.
var globalCompFlags = []compFlag{
	{"write-out", "words fields json protobuf simple table"},
	{"w", "words fields json protobuf simple table"},
	{"timeout", "any"},
	{"help", ""},
}

// flagValueKind says what a flag's value is, from its name: the flag
// names are stratautl's convention (and etcdutl's), so this covers every
// command.
func flagValueKind(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	switch f.Name {
	case "data-dir", "wal-dir", "dir":
		return "dir"
	case "out", "cacert", "cert", "key":
		return "file"
	case "type":
		return "words entry snapshot state"
	}
	return "any"
}

func completionSpec() *compSpec {
	s := &compSpec{subs: map[string][]string{}, flags: map[string][]compFlag{}, args: map[string]string{}}
	seen := map[string]bool{"": true}
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		words := strings.Fields(n)
		parent := ""
		for i, w := range words {
			p := strings.Join(words[:i+1], " ")
			if !seen[p] {
				seen[p] = true
				s.subs[parent] = append(s.subs[parent], w)
			}
			parent = p
		}
		c := commands[n]
		s.args[n] = c.args
		if fs := flagsOf(n); fs != nil {
			fs.VisitAll(func(f *flag.Flag) {
				s.flags[n] = append(s.flags[n], compFlag{f.Name, flagValueKind(f)})
			})
		}
	}
	s.subs[""] = append(s.subs[""], "help")
	sort.Strings(s.subs[""])
	for p := range seen {
		s.paths = append(s.paths, p)
	}
	sort.Strings(s.paths)
	return s
}

// dashed is a flag as the scripts offer it: -w, --data-dir.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// shFunctions are the lookup functions of the bash and zsh scripts, in
// the shell syntax both read:
//
//	__stratautl_subcommands PATH   the sub-command words of PATH
//	__stratautl_flags PATH         PATH's flags, dashed
//	__stratautl_value PATH FLAG    what FLAG's value is ("" for a switch, "?" unknown)
//	__stratautl_args PATH          what PATH's arguments are
func shFunctions(s *compSpec) string {
	var b strings.Builder
	b.WriteString("__stratautl_subcommands() {\n    case \"$1\" in\n")
	for _, p := range s.paths {
		if subs := s.subs[p]; len(subs) > 0 {
			fmt.Fprintf(&b, "    %q) echo %q ;;\n", p, strings.Join(subs, " "))
		}
	}
	b.WriteString("    esac\n}\n\n")
	b.WriteString("__stratautl_flags() {\n    case \"$1\" in\n")
	for _, p := range s.paths {
		var fl []string
		for _, f := range s.flags[p] {
			fl = append(fl, dashed(f.name))
		}
		if len(fl) > 0 {
			fmt.Fprintf(&b, "    %q) echo %q ;;\n", p, strings.Join(fl, " "))
		}
	}
	b.WriteString("    esac\n}\n\n")
	b.WriteString("__stratautl_value() {\n    local f=\"${2#-}\"\n    f=\"${f#-}\"\n    f=\"${f%%=*}\"\n    case \"$f\" in\n")
	for _, f := range globalCompFlags {
		fmt.Fprintf(&b, "    %q) echo %q; return ;;\n", f.name, f.value)
	}
	b.WriteString("    esac\n    case \"$1:$f\" in\n")
	for _, p := range s.paths {
		for _, f := range s.flags[p] {
			fmt.Fprintf(&b, "    %q) echo %q ;;\n", p+":"+f.name, f.value)
		}
	}
	b.WriteString("    *) echo \"?\" ;;\n    esac\n}\n\n")
	b.WriteString("__stratautl_args() {\n    case \"$1\" in\n")
	for _, p := range s.paths {
		switch a := s.args[p]; a {
		case "":
		case "file", "dir":
			fmt.Fprintf(&b, "    %q) echo %q ;;\n", p, a)
		default:
			fmt.Fprintf(&b, "    %q) echo %q ;;\n", p, "words "+a)
		}
	}
	b.WriteString("    esac\n}\n\n")
	// The command path of the words before the one being completed:
	// sub-command words in order, skipping flags and their values.
	b.WriteString(`__stratautl_path() {
    local cmd="" w kind skip=0
    for w in "$@"; do
        if [[ $skip -gt 0 ]]; then
            skip=$((skip - 1))
            [[ "$w" == "=" ]] && skip=$((skip + 1))
            continue
        fi
        case "$w" in
        --) break ;;
        -*=*) continue ;;
        -*)
            kind="$(__stratautl_value "$cmd" "$w")"
            [[ -n "$kind" && "$kind" != "?" ]] && skip=1
            continue
            ;;
        esac
        if [[ " $(__stratautl_subcommands "$cmd") " == *" $w "* ]]; then
            cmd="${cmd:+$cmd }$w"
        fi
    done
    echo "$cmd"
}
`)
	return b.String()
}

func globalFlagWords() string {
	var g []string
	for _, f := range globalCompFlags {
		g = append(g, dashed(f.name))
	}
	return strings.Join(g, " ")
}

func bashCompletion(s *compSpec) string {
	var b strings.Builder
	b.WriteString("# bash completion for stratautl, generated by 'stratautl completion bash'.\n")
	b.WriteString("# Load it with: source <(stratautl completion bash)\n\n")
	b.WriteString(shFunctions(s))
	fmt.Fprintf(&b, `
__stratautl_reply_value() {
    local kind="$1" cur="$2"
    case "$kind" in
    dir)
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -d -- "$cur"))
        ;;
    file)
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
        ;;
    words\ *)
        COMPREPLY=($(compgen -W "${kind#words }" -- "$cur"))
        ;;
    esac
}

_stratautl() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" flag="" cmd kind
    COMPREPLY=()
    [[ $COMP_CWORD -gt 0 ]] && prev="${COMP_WORDS[COMP_CWORD-1]}"
    cmd="$(__stratautl_path "${COMP_WORDS[@]:1:COMP_CWORD-1}")"
    # bash splits --flag=value at the '=' (COMP_WORDBREAKS).
    if [[ "$cur" == "=" && "$prev" == -* ]]; then
        flag="$prev"
        cur=""
    elif [[ "$prev" == "=" && $COMP_CWORD -gt 1 ]]; then
        flag="${COMP_WORDS[COMP_CWORD-2]}"
    elif [[ "$prev" == -* ]]; then
        flag="$prev"
    fi
    if [[ -n "$flag" && "$flag" == -* ]]; then
        kind="$(__stratautl_value "$cmd" "$flag")"
        if [[ -n "$kind" && "$kind" != "?" ]]; then
            __stratautl_reply_value "$kind" "$cur"
            return 0
        fi
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(__stratautl_flags "$cmd") %s" -- "$cur"))
        return 0
    fi
    local subs
    subs="$(__stratautl_subcommands "$cmd")"
    if [[ -n "$subs" ]]; then
        COMPREPLY=($(compgen -W "$subs" -- "$cur"))
        return 0
    fi
    kind="$(__stratautl_args "$cmd")"
    [[ -n "$kind" ]] && __stratautl_reply_value "$kind" "$cur"
    return 0
}

complete -F _stratautl stratautl
`, globalFlagWords())
	return b.String()
}

func zshCompletion(s *compSpec) string {
	var b strings.Builder
	b.WriteString("#compdef stratautl\n")
	b.WriteString("# zsh completion for stratautl, generated by 'stratautl completion zsh'.\n")
	b.WriteString("# Install it as _stratautl in a directory of $fpath, or source it.\n\n")
	b.WriteString(shFunctions(s))
	fmt.Fprintf(&b, `
__stratautl_add_value() {
    case "$1" in
    dir) _files -/ ;;
    file) _files ;;
    words\ *) compadd -- ${=${1#words }} ;;
    esac
}

_stratautl() {
    local cur="${words[CURRENT]}" prev="${words[CURRENT-1]}" cmd kind subs
    cmd="$(__stratautl_path "${(@)words[2,CURRENT-1]}")"
    if [[ "$cur" == -*=* ]]; then
        kind="$(__stratautl_value "$cmd" "${cur%%%%=*}")"
        compset -P '*='
        [[ -n "$kind" && "$kind" != "?" ]] && __stratautl_add_value "$kind"
        return
    fi
    if [[ "$prev" == -* ]]; then
        kind="$(__stratautl_value "$cmd" "$prev")"
        if [[ -n "$kind" && "$kind" != "?" ]]; then
            __stratautl_add_value "$kind"
            return
        fi
    fi
    if [[ "$cur" == -* ]]; then
        compadd -- ${=$(__stratautl_flags "$cmd")} %s
        return
    fi
    subs="$(__stratautl_subcommands "$cmd")"
    if [[ -n "$subs" ]]; then
        compadd -- ${=subs}
        return
    fi
    kind="$(__stratautl_args "$cmd")"
    [[ -n "$kind" ]] && __stratautl_add_value "$kind"
}

if [[ "${funcstack[1]}" == "_stratautl" ]]; then
    _stratautl "$@"
else
    compdef _stratautl stratautl
fi
`, globalFlagWords())
	return b.String()
}

// fishCompletion writes the same lookups as fish functions.
func fishCompletion(s *compSpec) string {
	var b strings.Builder
	b.WriteString("# fish completion for stratautl, generated by 'stratautl completion fish'.\n")
	b.WriteString("# Load it with: stratautl completion fish | source\n\n")
	b.WriteString("function __stratautl_subcommands\n    switch \"$argv[1]\"\n")
	for _, p := range s.paths {
		if subs := s.subs[p]; len(subs) > 0 {
			fmt.Fprintf(&b, "        case %s\n            echo %s\n", fishQuote(p), fishQuote(strings.Join(subs, " ")))
		}
	}
	b.WriteString("    end\nend\n\n")
	b.WriteString("function __stratautl_flags\n    switch \"$argv[1]\"\n")
	for _, p := range s.paths {
		var fl []string
		for _, f := range s.flags[p] {
			fl = append(fl, dashed(f.name))
		}
		if len(fl) > 0 {
			fmt.Fprintf(&b, "        case %s\n            echo %s\n", fishQuote(p), fishQuote(strings.Join(fl, " ")))
		}
	}
	b.WriteString("    end\nend\n\n")
	b.WriteString("function __stratautl_value\n    set -l f (string replace -r '^--?' '' -- $argv[2] | string replace -r '=.*' '')\n    switch $f\n")
	for _, f := range globalCompFlags {
		fmt.Fprintf(&b, "        case %s\n            echo %s\n            return\n", fishQuote(f.name), fishQuote(f.value))
	}
	b.WriteString("    end\n    switch \"$argv[1]:$f\"\n")
	for _, p := range s.paths {
		for _, f := range s.flags[p] {
			fmt.Fprintf(&b, "        case %s\n            echo %s\n", fishQuote(p+":"+f.name), fishQuote(f.value))
		}
	}
	b.WriteString("        case '*'\n            echo '?'\n    end\nend\n\n")
	b.WriteString("function __stratautl_args\n    switch \"$argv[1]\"\n")
	for _, p := range s.paths {
		switch a := s.args[p]; a {
		case "":
		case "file", "dir":
			fmt.Fprintf(&b, "        case %s\n            echo %s\n", fishQuote(p), a)
		default:
			fmt.Fprintf(&b, "        case %s\n            echo %s\n", fishQuote(p), fishQuote("words "+a))
		}
	}
	b.WriteString("    end\nend\n\n")
	fmt.Fprintf(&b, `function __stratautl_value_candidates
    switch "$argv[1]"
        case dir
            __fish_complete_directories "$argv[2]"
        case file
            __fish_complete_path "$argv[2]"
        case 'words *'
            string split ' ' -- (string replace 'words ' '' -- "$argv[1]")
    end
end

function __stratautl_complete
    set -l toks (commandline -opc)
    set -l cur (commandline -ct)
    set -l cmd ''
    set -l skip 0
    for w in $toks[2..-1]
        if test $skip -gt 0
            set skip (math $skip - 1)
            continue
        end
        switch $w
            case '--'
                break
            case '-*=*'
                continue
            case '-*'
                set -l kind (__stratautl_value "$cmd" $w)
                if test -n "$kind" -a "$kind" != '?'
                    set skip 1
                end
                continue
        end
        if contains -- $w (string split ' ' -- (__stratautl_subcommands "$cmd"))
            set cmd (string trim -- "$cmd $w")
        end
    end
    if string match -q -- '-*=*' $cur
        set -l kind (__stratautl_value "$cmd" $cur)
        set -l prefix (string replace -r '=.*' '=' -- $cur)
        for c in (__stratautl_value_candidates "$kind" (string replace -r '^[^=]*=' '' -- $cur))
            echo "$prefix$c"
        end
        return
    end
    if test (count $toks) -gt 1; and string match -q -- '-*' $toks[-1]
        set -l kind (__stratautl_value "$cmd" $toks[-1])
        if test -n "$kind" -a "$kind" != '?'
            __stratautl_value_candidates "$kind" "$cur"
            return
        end
    end
    if string match -q -- '-*' $cur
        string split ' ' -- (__stratautl_flags "$cmd") %s
        return
    end
    set -l subs (__stratautl_subcommands "$cmd")
    if test -n "$subs"
        string split ' ' -- $subs
        return
    end
    __stratautl_value_candidates (__stratautl_args "$cmd") "$cur"
end

complete -c stratautl -f -a '(__stratautl_complete)'
`, fishQuote(globalFlagWords()))
	return b.String()
}

func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func psQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// powershellCompletion registers a native argument completer with the
// same tables as hashtables.
func powershellCompletion(s *compSpec) string {
	var b strings.Builder
	b.WriteString("# powershell completion for stratautl, generated by 'stratautl completion powershell'.\n")
	b.WriteString("# Load it with: stratautl completion powershell | Out-String | Invoke-Expression\n\n")
	b.WriteString("Register-ArgumentCompleter -Native -CommandName 'stratautl' -ScriptBlock {\n")
	b.WriteString("    param($wordToComplete, $commandAst, $cursorPosition)\n\n")
	b.WriteString("    $subcommands = @{\n")
	for _, p := range s.paths {
		if subs := s.subs[p]; len(subs) > 0 {
			var q []string
			for _, w := range subs {
				q = append(q, psQuote(w))
			}
			fmt.Fprintf(&b, "        %s = @(%s)\n", psQuote(p), strings.Join(q, ", "))
		}
	}
	b.WriteString("    }\n    $flags = @{\n")
	for _, p := range s.paths {
		var q []string
		for _, f := range s.flags[p] {
			q = append(q, psQuote(dashed(f.name)))
		}
		if len(q) > 0 {
			fmt.Fprintf(&b, "        %s = @(%s)\n", psQuote(p), strings.Join(q, ", "))
		}
	}
	b.WriteString("    }\n    $values = @{\n")
	for _, f := range globalCompFlags {
		fmt.Fprintf(&b, "        %s = %s\n", psQuote(":"+f.name), psQuote(f.value))
	}
	for _, p := range s.paths {
		for _, f := range s.flags[p] {
			fmt.Fprintf(&b, "        %s = %s\n", psQuote(p+":"+f.name), psQuote(f.value))
		}
	}
	b.WriteString("    }\n    $arguments = @{\n")
	for _, p := range s.paths {
		switch a := s.args[p]; a {
		case "":
		case "file", "dir":
			fmt.Fprintf(&b, "        %s = %s\n", psQuote(p), psQuote(a))
		default:
			fmt.Fprintf(&b, "        %s = %s\n", psQuote(p), psQuote("words "+a))
		}
	}
	var g []string
	for _, f := range globalCompFlags {
		g = append(g, psQuote(dashed(f.name)))
	}
	fmt.Fprintf(&b, `    }
    $globalFlags = @(%s)

    function Get-ValueKind([string]$cmd, [string]$flag) {
        $f = ($flag -replace '^--?', '') -replace '=.*$', ''
        if ($values.ContainsKey(":$f")) { return $values[":$f"] }
        if ($values.ContainsKey("${cmd}:$f")) { return $values["${cmd}:$f"] }
        return '?'
    }

    $before = @($commandAst.CommandElements | Where-Object { $_.Extent.EndOffset -lt $cursorPosition } | ForEach-Object { $_.ToString() })
    $cmd = ''
    $skip = 0
    for ($i = 1; $i -lt $before.Count; $i++) {
        $w = $before[$i]
        if ($skip -gt 0) { $skip--; continue }
        if ($w -eq '--') { break }
        if ($w -like '-*=*') { continue }
        if ($w -like '-*') {
            $kind = Get-ValueKind $cmd $w
            if ($kind -ne '' -and $kind -ne '?') { $skip = 1 }
            continue
        }
        if ($subcommands.ContainsKey($cmd) -and $subcommands[$cmd] -contains $w) {
            $cmd = ("$cmd $w").Trim()
        }
    }

    $candidates = @()
    $kind = ''
    $prev = if ($before.Count -gt 1) { $before[$before.Count - 1] } else { '' }
    if ($prev -like '-*' -and $prev -notlike '*=*') { $kind = Get-ValueKind $cmd $prev }
    if ($kind -ne '' -and $kind -ne '?') {
        if ($kind -like 'words *') { $candidates = $kind.Substring(6).Split(' ') } else { return }
    } elseif ($wordToComplete -like '-*') {
        if ($flags.ContainsKey($cmd)) { $candidates += $flags[$cmd] }
        $candidates += $globalFlags
    } elseif ($subcommands.ContainsKey($cmd)) {
        $candidates = $subcommands[$cmd]
    } elseif ($arguments.ContainsKey($cmd)) {
        $a = $arguments[$cmd]
        if ($a -like 'words *') { $candidates = $a.Substring(6).Split(' ') } else { return }
    }
    $candidates | Where-Object { $_ -like "$wordToComplete*" } | ForEach-Object {
        [System.Management.Automation.CompletionResult]::new($_, $_, 'ParameterValue', $_)
    }
}
`, strings.Join(g, ", "))
	return b.String()
}
