#!/usr/bin/env bash
# complete_words.bash BASH_COMPLETION COMPLETION DIR LINE: what COMPLETION's function for the
# command LINE begins with offers for the word at LINE's end (the cursor), run in DIR, one word a
# line; then "compopt ARGS" for each compopt it called. BASH_COMPLETION is bash-completion's main
# script, which the function's helpers come from, as in an interactive shell. LINE is split into
# COMP_WORDS as readline splits it: at blanks, and around each run of COMP_WORDBREAKS' other
# characters ("--inhibit=a" is "--inhibit" "=" "a").
set -u
# shellcheck source=/dev/null
. "$1"
# shellcheck source=/dev/null
. "$2"
cd "$3" || exit 1
line=$4

# Outside of readline the builtin refuses to run: record what the function asks of it instead
# (in a name of its own: _filedir has a local opts).
compopt_calls=()
compopt() {
  local IFS=' '  # the callers' may be a newline (_filedir's)
  compopt_calls+=("$*")
}

breaks=${COMP_WORDBREAKS//[[:blank:]$'\n'\"\']/}
words=()
word=
in_breaks=0
for ((i = 0; i < ${#line}; i++)); do
  c=${line:i:1}
  if [[ $c == [[:blank:]] ]]; then
    [[ -n $word ]] && words+=("$word")
    word='' in_breaks=0
  elif [[ $breaks == *"$c"* ]]; then
    ((in_breaks)) || { [[ -n $word ]] && words+=("$word"); word=; }
    word+=$c in_breaks=1
  else
    ((in_breaks)) && { words+=("$word"); word=; }
    word+=$c in_breaks=0
  fi
done
words+=("$word")

spec=$(complete -p "${words[0]}") || exit 1
[[ $spec =~ -F\ ([^ ]+) ]] || exit 1
COMP_WORDS=("${words[@]}")
COMP_CWORD=$((${#words[@]} - 1))
COMP_LINE=$line
COMP_POINT=${#line}
COMP_TYPE=9
COMP_KEY=9
COMPREPLY=()
"${BASH_REMATCH[1]}" "${words[0]}" "${words[COMP_CWORD]}" "${words[COMP_CWORD - 1]:-}"
for w in "${COMPREPLY[@]}"; do printf '%s\n' "$w"; done
for o in "${compopt_calls[@]}"; do printf 'compopt %s\n' "$o"; done
