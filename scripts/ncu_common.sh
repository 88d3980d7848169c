# What scripts/ncu_warp_state.sh and scripts/ncu_stall_source.sh share (sourced, not run):
# the builds they profile and the one launch they profile.
#
# ncu_build LOG [PATCH ... | --no-patches]: builds /tmp/exp_tree from this tree, /tmp/exp_<patch>
# for each patch of benchmarks/experiments and /tmp/exp_base from .kb_base if carried
# (benchmarks/experiments/measure.sh BUILD_ONLY=1; no argument: --no-patches), its log to LOG.
ncu_build() {
  local log=$1
  shift
  (($#)) || set -- --no-patches
  BUILD_ONLY=1 bash "$(dirname "${BASH_SOURCE[0]}")/../benchmarks/experiments/measure.sh" "$@" >"$log" 2>&1
}

# The launch profiled: kernel_bench's 41st split-kernel launch (after 40 in its warm-up, inside
# its CUDA graph), with the clocks and caches as the benchmark leaves them (ncu would otherwise
# lock the clocks to base and flush the caches before each pass), application replay so that
# every pass sees the same state. Use: ncu "${NCU_SPLIT_LAUNCH[@]}" --metrics ... /tmp/exp_tree L R W S
NCU_SPLIT_LAUNCH=(--clock-control none --cache-control none --replay-mode application
  -k regex:split_kernel -s 40 -c 1)
