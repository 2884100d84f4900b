// glog without gflags for shared objects (the NCCL plugin, the Python
// module): libgflags.a is not position independent, and glog's flag
// definitions only need FlagRegisterer, made a no-op here.
#include <gflags/gflags.h>

#include <string>

namespace google {

// glog's flags keep their defaults (GLOG_* variables still set them, since
// glog reads those itself); nothing parses command lines in NCCL's process.
template <typename FlagType>
FlagRegisterer::FlagRegisterer(const char* name, const char* help,
                               const char* filename, FlagType* current,
                               FlagType* defvalue) {
  (void)name;
  (void)help;
  (void)filename;
  (void)current;
  (void)defvalue;
}

template FlagRegisterer::FlagRegisterer(const char*, const char*, const char*,
                                        bool*, bool*);
template FlagRegisterer::FlagRegisterer(const char*, const char*, const char*,
                                        int32_t*, int32_t*);
template FlagRegisterer::FlagRegisterer(const char*, const char*, const char*,
                                        uint32_t*, uint32_t*);
template FlagRegisterer::FlagRegisterer(const char*, const char*, const char*,
                                        std::string*, std::string*);

}  // namespace google
