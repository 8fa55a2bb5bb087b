#!/bin/sh
# tests/check_docs_links.sh [ROOT] — every relative link in README.md, CONTRIBUTING.md and
# docs/*.md resolves: the file or folder it names exists (relative to the linking file), and a
# #fragment names a heading of the linked Markdown file (or of the same file, for a bare
# #fragment), as GitHub makes its anchors: lower case, punctuation but '-' and '_' dropped,
# spaces turned into '-', a repeated heading suffixed -1, -2, ... Links with a scheme
# (https:, mailto:) are not followed; links inside fenced code blocks and `code spans` are not
# links. Prints each broken link as FILE:LINE: TARGET (why) and exits 1 if there is one.
# POSIX sh and awk only; run as the ctest test docs:links (tests/CMakeLists.txt).
set -u
root=${1:-.}
cd "$root" || exit 2

# links FILE: "LINE<TAB>TARGET" for each Markdown link outside code.
links() {
  awk '
    /^ *(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    {
      line = $0
      gsub(/``[^`]*``/, "", line)
      gsub(/`[^`]*`/, "", line)
      while (match(line, /\]\([^) ]+( [^)]*)?\)/)) {
        target = substr(line, RSTART + 2, RLENGTH - 3)
        sub(/ .*/, "", target)
        print NR "\t" target
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}

# anchors FILE: the anchor of each heading outside code, one per line.
anchors() {
  awk '
    /^ *(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    /^#+ / {
      h = $0
      sub(/^#+ +/, "", h)
      sub(/ +#+ *$/, "", h)
      h = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", h)
      gsub(/ /, "-", h)
      if (h in seen) { seen[h]++; print h "-" seen[h] } else { seen[h] = 0; print h }
    }' "$1"
}

broken=0
checked=0
for file in README.md CONTRIBUTING.md docs/*.md; do
  [ -f "$file" ] || continue
  dir=$(dirname "$file")
  tab=$(printf '\t')
  links "$file" > "${TMPDIR:-/tmp}/sprig_links.$$"
  while IFS="$tab" read -r line target; do
    case $target in
      *:*) continue ;;  # a scheme: https:, mailto:, ...
    esac
    checked=$((checked + 1))
    path=${target%%#*}
    anchor=
    case $target in *'#'*) anchor=${target#*#} ;; esac
    if [ -z "$path" ]; then
      resolved=$file
    else
      resolved=$dir/$path
      if [ ! -e "$resolved" ]; then
        echo "$file:$line: $target (no such file: $resolved)"
        broken=$((broken + 1))
        continue
      fi
    fi
    if [ -n "$anchor" ]; then
      case $resolved in
        *.md)
          if ! anchors "$resolved" | grep -qx -- "$anchor"; then
            echo "$file:$line: $target (no heading with anchor #$anchor in $resolved)"
            broken=$((broken + 1))
          fi ;;
      esac
    fi
  done < "${TMPDIR:-/tmp}/sprig_links.$$"
  rm -f "${TMPDIR:-/tmp}/sprig_links.$$"
done

if [ "$broken" -gt 0 ]; then
  echo "docs:links: $broken of $checked relative links are broken"
  exit 1
fi
echo "docs:links: all $checked relative links resolve"
