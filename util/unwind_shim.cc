// libunwind entry points that Debian's static glog references for stack
// traces; linked only in static builds, where they report "no frames".
extern "C" {
int _ULx86_64_init_local(void*, void*) { return -1; }
int _ULx86_64_step(void*) { return 0; }
int _ULx86_64_get_reg(void*, int, void*) { return -1; }
int _Ux86_64_getcontext(void*) { return -1; }
}
