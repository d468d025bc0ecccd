set -uo pipefail
exec > >(tee -a "$OUT/d.log") 2>&1
source .bench/s24/env.sh
unpack .bench/s24b/poot-serve.xz
up() { for i in $(seq 1 900); do python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:18080/health", timeout=2)' >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
for m in "$M1" "$MQ"; do n=$(basename "$m" .gguf)
  t0=$SECONDS; POOT_PTX_COMPILE_THREADS=0 "$W/bin/poot-serve" --model "$m" --backend ptx --port 18080 --parallel 64 --ctx-size 1024 >"$OUT/$n.poot2.log" 2>&1 & pid=$!
  up; echo "$n poot-serve ready after $((SECONDS-t0)) s"
  for w in $(seq 1 200); do grep -q "every step variant" "$OUT/$n.poot2.log" && break; sleep 1; done; echo "variants done after $((SECONDS-t0)) s"; cat "$OUT/$n.poot2.log"
  timeout 170 python3 scripts/bench/serve_sweep.py --url http://127.0.0.1:18080 --vocab 32000 --concurrency 1,16,64 --min-requests 4 --label poot --json "$OUT/$n.poot2.json"
  kill $pid; wait $pid 2>/dev/null
done
