# Where a GPU script keeps its logs, and what of them comes back from a lent device machine (sourced by
# scripts/gpu.sh, gpu_attention.sh, gpu_ab.sh and gpu_ab_set.sh). The logs always go to the script's
# folder under build/; when $OUT is set (the device tool brings back at most 8 files from it, and
# nothing at all when there are more), the script's exit leaves in $OUT its summary.txt, when it wrote
# one, and one archive of the whole folder, <folder>.tar.gz.
#
#   source scripts/device_logs.sh; device_logs build/gpu-logs    # sets $logs
device_logs() {
  logs="$1"
  mkdir -p "$logs"
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    trap device_logs_to_out EXIT
  fi
}

# The EXIT trap: copies, and leaves the script's exit status as it was.
device_logs_to_out() {
  if [ -f "$logs/summary.txt" ]; then cp "$logs/summary.txt" "$OUT/"; fi
  tar -czf "$OUT/$(basename "$logs").tar.gz" -C "$logs" . || echo "device_logs: could not archive $logs into $OUT" >&2
}
