"""Shell completion of the `objstore` command for bash and zsh.

`objstore completion bash|zsh` prints a script that asks the command itself for candidates
(`objstore __complete INDEX WORD...`), so completion always matches the installed command's
table: subcommands, options, and the values of options with a fixed set of choices.
`candidates` is pure: it walks the argparse tree with the words typed so far.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence

COMPLETE = "__complete"

BASH = """\
# bash completion of objstore: eval "$(objstore completion bash)" (e.g. in ~/.bashrc), or
# save it as /usr/share/bash-completion/completions/objstore
_objstore() {
    local IFS=$'\\n'
    COMPREPLY=($(objstore __complete "$COMP_CWORD" "${COMP_WORDS[@]:1}" 2>/dev/null))
}
complete -o default -F _objstore objstore
"""

ZSH = """\
#compdef objstore
# zsh completion of objstore: save it as _objstore in a directory of $fpath (e.g.
# /usr/share/zsh/vendor-completions) before compinit runs, or
# `source <(objstore completion zsh)` after compinit. Without a candidate, file names.
_objstore() {
    local -a found
    found=(${(f)"$(objstore __complete $((CURRENT - 1)) "${(@)words[2,-1]}" 2>/dev/null)"})
    if (( ${#found} )); then
        compadd -- "${(@)found}"
    else
        _files
    fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _objstore "$@"
else
    compdef _objstore objstore
fi
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings
            if action.help != argparse.SUPPRESS or flag.startswith("--")}


def _positionals(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if not action.option_strings
            and not isinstance(action, argparse._SubParsersAction)]


def _matching(choices: Iterable[object] | None, current: str) -> list[str]:
    return sorted(str(c) for c in choices or () if str(c).startswith(current))


def candidates(parser: argparse.ArgumentParser, typed: Sequence[str], current: str
               ) -> list[str]:
    """What may follow `typed` (the complete words after the program name) and starts with
    `current` (the word being typed): subcommands, options, and the choices of an option's
    value or of a positional argument."""
    level = parser
    expects_value: argparse.Action | None = None
    positionals_seen = 0
    for word in typed:
        if expects_value is not None:
            expects_value = None
            continue
        options = _options(level)
        if word in options:
            action = options[word]
            if action.nargs != 0:
                expects_value = action
            continue
        below = _subcommands(level)
        if word in below:
            level = below[word]
            positionals_seen = 0
        elif not word.startswith("-"):
            positionals_seen += 1
    if expects_value is not None:
        return _matching(expects_value.choices, current)
    found = list(_subcommands(level))
    positionals = _positionals(level)
    if not found and not current.startswith("-") and positionals_seen < len(positionals):
        found += _matching(positionals[positionals_seen].choices, current)
    if current.startswith("-") or not found:
        found += [flag for flag in _options(level) if flag.startswith("--")]
    return sorted(name for name in set(found)
                  if name.startswith(current) and name != COMPLETE)


def complete(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str:
    """The output of `objstore __complete INDEX WORD...`: one candidate per line. INDEX is
    the position of the word being completed among the words after the program name, plus
    one (bash's COMP_CWORD, zsh's CURRENT - 1)."""
    if not argv or not argv[0].isdigit():
        return ""
    index = int(argv[0]) - 1
    words = list(argv[1:])
    current = words[index] if 0 <= index < len(words) else ""
    return "".join(line + "\n" for line in candidates(parser, words[:max(index, 0)], current))


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    completion = commands.add_parser(
        "completion", help="print a shell completion script (bash or zsh)",
        description="print a shell completion script: eval \"$(objstore completion bash)\"")
    completion.add_argument("shell", choices=sorted(SCRIPTS))


def run(args: argparse.Namespace) -> int:
    print(SCRIPTS[args.shell], end="")
    return 0


__all__ = ["COMPLETE", "SCRIPTS", "add_command", "candidates", "complete", "run"]
