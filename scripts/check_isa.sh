#!/usr/bin/env bash
# Fails when a function of the binary uses instructions above its ISA level: AVX-512 (zmm, opmask
# registers, xmm/ymm 16-31) outside functions whose name contains "avx512", or AVX (ymm) outside
# those whose name contains "avx2::" or "avx512". An ISA file's code lives in such namespaces
# (docs/ARCHITECTURE.md, "CPU instruction sets"), so anything else that uses them is a template or
# inline function compiled at a higher level and kept by the linker for every caller.
set -euo pipefail
bin="${1:-build/unillm}"
[[ -f "$bin" ]] || { echo "check_isa: $bin is not a file (give the unillm binary)" >&2; exit 2; }
objdump -d --no-show-raw-insn -C "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = substr($0, index($0, "<")); next }
  /%zmm|%k[0-7][,)]|%k[0-7]$|%[xy]mm(1[6-9]|2[0-9]|3[01])/ {
    if (fn !~ /avx512/ && !(fn in bad)) { bad[fn] = "AVX-512"; n++ } next }
  /%ymm/ { if (fn !~ /avx2::|avx512/ && !(fn in bad)) { bad[fn] = "AVX"; n++ } }
  END {
    for (f in bad) printf "check_isa: %s instructions in %s\n", bad[f], f
    if (n) exit 1
    print "check_isa: every AVX/AVX-512 instruction is inside an ISA namespace"
  }'
