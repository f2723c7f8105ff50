# Shared by the A/B scripts (gpu_ab.sh, gpu_ab_set.sh); sourced, not run.
#   ab_find_trees "NAMES"      trees=(.variants/<name>…): NAMES, or every tree scripts/ab_prepare.sh made
#   ab_build LOGS TARGET…      builds TARGETs of every tree side by side (each a share of the cores)
#                              in build/ab/<name>, outside .variants so a re-carried .variants keeps them
ab_find_trees() {
  trees=()
  if [ -n "$1" ]; then
    for n in $1; do
      if [ ! -f ".variants/$n/CMakeLists.txt" ]; then echo "no source tree .variants/$n" >&2; exit 1; fi
      trees+=(".variants/$n")
    done
  else
    for d in .variants/*/; do [ -f "$d/CMakeLists.txt" ] && trees+=("${d%/}"); done
  fi
  if [ "${#trees[@]}" -eq 0 ]; then
    echo "no source trees in .variants (scripts/ab_prepare.sh REV...)" >&2
    exit 1
  fi
}

ab_build() {
  local logs="$1" t name job t0 jobs_each
  shift
  if [ -d .deps/pcre2/lib/pkgconfig ]; then
    export PKG_CONFIG_PATH="$PWD/.deps/pcre2/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  fi
  jobs_each=$(( $(nproc) / ${#trees[@]} )); [ "$jobs_each" -ge 1 ] || jobs_each=1
  t0=$(date +%s)
  for t in "${trees[@]}"; do
    name=$(basename "$t")
    ( cmake -S "$t" -B "build/ab/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_CUDA=ON -DK3_BUILD_TESTS=OFF \
        >"$logs/$name.configure.log" 2>&1 &&
      cmake --build "build/ab/$name" -j "$jobs_each" --target "$@" >"$logs/$name.build.log" 2>&1 ) &
  done
  build_rc=0
  for job in $(jobs -p); do wait "$job" || build_rc=1; done
  echo "builds: exit $build_rc in $(( $(date +%s) - t0 )) s"
}
