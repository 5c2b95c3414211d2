#!/usr/bin/env bash
# Preprocessing at two data-set sizes: wall time, images/s per rank, peak resident
# memory per rank (VmHWM, reported by pets_preprocess under PETS_REPORT_MEMORY=1) and store size,
# under -np 1 and -np 2, on a synthetic set of BASE images and one FACTOR times larger.
#
#   bench/preprocess_bench.sh [--work DIR] [--per-class N] [--factor F] [--max-side S]
#                             [--max-memory SIZE] [--np "1 2"] [--keep]
#
# The small set is `pets_synth --per-class N` (37 classes; default 200, 7,400 images, the Pets
# size); the large one holds each of its files F times (default 5, 37,000 images) under new
# numbers, as hard links: the same decoding work per image without synthesising (or storing) the
# images again. Image folders are kept in --work for the next run; stores are removed after each
# measurement unless --keep. Prints one JSON object per run and a Markdown table with the ratios
# between the sizes. PETS_BUILD selects the build folder (default build/).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${PETS_BUILD:-$here/../build}"
work="$build/bench-preprocess" per_class=200 factor=5 max_side=128 max_memory=64M nps="1 2" keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --work) work="$2"; shift 2 ;;
    --per-class) per_class="$2"; shift 2 ;;
    --factor) factor="$2"; shift 2 ;;
    --max-side) max_side="$2"; shift 2 ;;
    --max-memory) max_memory="$2"; shift 2 ;;
    --np) nps="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "preprocess_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
synth="$build/pets_synth" prep="$build/pets_preprocess"
for exe in "$synth" "$prep"; do
  [[ -x "$exe" ]] || { echo "preprocess_bench.sh: $exe is not built" >&2; exit 3; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work"
small_n=$((37 * per_class)) large_n=$((37 * per_class * factor))
small="$work/images-$small_n" large="$work/images-$large_n"

count_jpg() { find "$1" -maxdepth 1 -name '*.jpg' | wc -l; }
if [[ ! -d "$small" ]] || [[ "$(count_jpg "$small")" -ne $small_n ]]; then
  rm -rf "$small"
  echo "preprocess_bench.sh: synthesising $small_n images into $small" >&2
  "$synth" --out "$small" --per-class "$per_class" --seed 1 >/dev/null
fi
if [[ ! -d "$large" ]] || [[ "$(count_jpg "$large")" -ne $large_n ]]; then
  rm -rf "$large" && mkdir -p "$large"
  echo "preprocess_bench.sh: linking $large_n images into $large" >&2
  for f in "$small"/*.jpg; do
    base=$(basename "$f" .jpg) breed=${base%_*} n=${base##*_}
    for ((k = 0; k < factor; ++k)); do ln "$f" "$large/${breed}_$((n + k * per_class)).jpg"; done
  done
fi

echo "preprocess_bench.sh: $(uptime)" >&2
results=()
for np in $nps; do
  for images in "$small" "$large"; do
    n=$(count_jpg "$images") out="$work/store-$n-np$np.h5" log="$work/preprocess-$n-np$np.log"
    t0=$(date +%s.%N)
    PETS_REPORT_MEMORY=1 mpiexec -n "$np" --oversubscribe "$prep" --images "$images" --out "$out" \
      --max-side "$max_side" --max-memory "$max_memory" --overwrite >"$log" 2>"$log.err" ||
      { echo "preprocess_bench.sh: pets_preprocess failed, see $log" >&2; tail -5 "$log" "$log.err" >&2; exit 1; }
    t1=$(date +%s.%N)
    stored=$(sed -n 's/.*[:;] \([0-9]*\) stored, .*/\1/p' "$log")
    rounds=$(sed -n 's/^pets_preprocess: \([0-9]*\) rounds;.*/\1/p' "$log.err")
    peaks=$(sed -n 's/^pets_preprocess: .* per rank (MiB): //p' "$log.err")
    bytes=$(stat -c %s "$out")
    [[ $keep -eq 1 ]] || rm -f "$out"
    json=$(python3 - "$n" "$np" "$t0" "$t1" "$stored" "$rounds" "$bytes" "$max_side" "$max_memory" $peaks <<'EOF'
import json, sys
n, np_, t0, t1, stored, rounds, size, side, mem = sys.argv[1:10]
peaks = [int(p) for p in sys.argv[10:]]
wall = float(t1) - float(t0)
print(json.dumps({"images": int(n), "stored": int(stored), "np": int(np_), "wall_s": round(wall, 2),
                  "images_per_s_per_rank": round(int(stored) / wall / int(np_), 1),
                  "ms_per_image": round(1000 * wall / int(stored), 3), "rounds": int(rounds),
                  "peak_rss_mib_per_rank": peaks, "store_bytes": int(size),
                  "max_side": int(side), "max_memory": mem}))
EOF
)
    echo "$json"
    results+=("$json")
  done
done
echo "preprocess_bench.sh: $(uptime)" >&2

python3 - "${results[@]}" <<'EOF' >&2
import json, sys
runs = [json.loads(a) for a in sys.argv[1:]]
print("| images | ranks | wall s | img/s per rank | ms per image | rounds | peak RSS per rank (MiB) | store |")
print("|---|---|---|---|---|---|---|---|")
for r in runs:
    print(f"| {r['images']} | {r['np']} | {r['wall_s']} | {r['images_per_s_per_rank']} | "
          f"{r['ms_per_image']} | {r['rounds']} | {', '.join(map(str, r['peak_rss_mib_per_rank']))} | "
          f"{r['store_bytes'] / 2**20:.0f} MiB |")
print()
by_np = {}
for r in runs:
    by_np.setdefault(r["np"], []).append(r)
for np_, (a, b) in ((k, sorted(v, key=lambda r: r["images"])) for k, v in by_np.items() if len(v) == 2):
    peak = max(b["peak_rss_mib_per_rank"]) / max(a["peak_rss_mib_per_rank"])
    per_image = b["ms_per_image"] / a["ms_per_image"]
    print(f"-np {np_}: {b['images']} vs {a['images']} images: peak RSS per rank x{peak:.3f} "
          f"(target within 10 %), wall time per image x{per_image:.3f} (target within 15 %)")
EOF
