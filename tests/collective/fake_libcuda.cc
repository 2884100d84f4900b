// A stand-in for CUDA's driver library (libcuda.so.1) in the NCCL plugin's
// conformance harness: cuCtxGetDevice reports what the calling thread set.
namespace {
thread_local int g_device = -1;  // -1: no current context
}  // namespace

extern "C" {

// CUresult cuCtxGetDevice(CUdevice*): 0 success, 201 no current context.
__attribute__((visibility("default"))) int cuCtxGetDevice(int* device) {
  if (g_device < 0) return 201;
  *device = g_device;
  return 0;
}

// The harness's hook: this thread's "current" device (-1: none).
__attribute__((visibility("default"))) void fake_cuda_set_device(int device) {
  g_device = device;
}

}  // extern "C"
