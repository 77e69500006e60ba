#!/usr/bin/env bash
# A man page from one of the project's Markdown documents, so the page and
# the document cannot disagree (ckptfs-mapping(5) is mappings/README.md):
#   bash tools/md2man.sh DOC.md NAME SECTION VERSION "one-line summary" > NAME.SECTION
# It knows the Markdown these documents use: # / ## / ### headings, paragraphs,
# "- " lists, ``` blocks, | tables | (a tagged paragraph per row), `code`,
# **bold** and [links](...).
set -euo pipefail
doc=$1 name=$2 section=$3 version=$4 summary=$5
upper=$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')
printf '.TH %s %s "" "ckptfs %s" "File Formats"\n' "$upper" "$section" "$version"
printf '.SH NAME\n%s \\- %s\n' "$name" "$summary"
awk '
function inline(s) {
	gsub(/\\/, "\\e", s)
	gsub(/\*\*/, "\001", s)          # **bold**
	while (match(s, /\001[^\001]*\001/))
		s = substr(s, 1, RSTART - 1) "\\fB" substr(s, RSTART + 1, RLENGTH - 2) "\\fR" substr(s, RSTART + RLENGTH)
	while (match(s, /`[^`]*`/))      # `code`
		s = substr(s, 1, RSTART - 1) "\\fB" substr(s, RSTART + 1, RLENGTH - 2) "\\fR" substr(s, RSTART + RLENGTH)
	while (match(s, /\[[^]]*\]\([^)]*\)/)) {   # [text](link): the text
		t = substr(s, RSTART + 1, RLENGTH - 1); sub(/\]\(.*/, "", t)
		s = substr(s, 1, RSTART - 1) t substr(s, RSTART + RLENGTH)
	}
	return s
}
function out(s) {               # a text line: no request characters at its start
	if (s ~ /^[.\047]/) s = "\\&" s
	print s
}
function cells(s,    n, i, a) {
	sub(/^\|/, "", s); sub(/\|[ \t]*$/, "", s)
	n = split(s, a, /\|/)
	for (i = 1; i <= n; i++) { gsub(/^[ \t]+|[ \t]+$/, "", a[i]); C[i] = inline(a[i]) }
	return n
}
BEGIN { fence = 0; first = 1; table = 0 }
/^```/ { if (!fence) { print ".PP\n.nf\n.RS 2"; fence = 1 } else { print ".RE\n.fi"; fence = 0 } next }
fence { line = $0; gsub(/\\/, "\\e", line); out(line); next }
/^# / { if (first) { first = 0; print ".SH DESCRIPTION"; next } }
/^#+ / {
	level = index($0, " ") - 1; t = substr($0, level + 2)
	print (level <= 2 ? ".SH " : ".SS ") toupper(inline(t)); table = 0; next
}
/^\|/ {
	n = cells($0)
	if (!table) { table = 1; next }          # the header row
	if (C[1] ~ /^-+$/) next                  # |---|---|
	print ".TP"; out(C[1]); rest = C[2]
	for (i = 3; i <= n; i++) rest = rest " \\(em " C[i]
	out(rest); next
}
/^- / { print ".IP \\(bu 2"; out(inline(substr($0, 3))); table = 0; next }
/^[ \t]*$/ { print ".PP"; table = 0; next }
{ table = 0; out(inline($0)) }
' "$doc"
printf '.SH SEE ALSO\n.BR ckptfs (1)\n'
