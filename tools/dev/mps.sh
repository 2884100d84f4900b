# Sourced by the GPU session scripts: mps_start runs a CUDA MPS daemon in a
# private directory (stopped, and the directory removed, when the shell exits)
# so kernels of several processes on one GPU run at once, not time-sliced.
# A script started from one that already runs the daemon uses that one.
mps_start() {
  [ -n "${GPU_SCRIPTS_MPS_UP:-}" ] && return 0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/uccl-mps/pipe
  export CUDA_MPS_LOG_DIRECTORY=/tmp/uccl-mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "FAILED: MPS did not start"; exit 1; }
  export GPU_SCRIPTS_MPS_UP=1
  trap 'echo quit | nvidia-cuda-mps-control; rm -rf /tmp/uccl-mps' EXIT
}
