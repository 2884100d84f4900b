# Dependency discovery: glog, gflags, GoogleTest (static or shared), Boost
# headers, pybind11, and optional libibverbs headers / CUDA toolkit.

find_package(Threads REQUIRED)

function(uccl_find_lib out_var)
  # uccl_find_lib(VAR name1 [name2...]): first library found, or FATAL_ERROR.
  find_library(${out_var} NAMES ${ARGN}
    PATHS /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib)
  if(NOT ${out_var})
    message(FATAL_ERROR "Missing library (${ARGN}). Run tools/install_deps.sh")
  endif()
endfunction()

find_path(GLOG_INCLUDE_DIR glog/logging.h)
find_path(GFLAGS_INCLUDE_DIR gflags/gflags.h)
find_path(GTEST_INCLUDE_DIR gtest/gtest.h)
find_path(BOOST_LOCKFREE_DIR boost/lockfree/spsc_queue.hpp)
foreach(hdr GLOG_INCLUDE_DIR GFLAGS_INCLUDE_DIR GTEST_INCLUDE_DIR BOOST_LOCKFREE_DIR)
  if(NOT ${hdr})
    message(FATAL_ERROR "Missing headers (${hdr}). Run tools/install_deps.sh")
  endif()
endforeach()

if(UCCL_STATIC_DEPS)
  uccl_find_lib(GLOG_LIB libglog.a)
  uccl_find_lib(GFLAGS_LIB libgflags.a)
  uccl_find_lib(GTEST_LIB libgtest.a)
  uccl_find_lib(GTEST_MAIN_LIB libgtest_main.a)
  uccl_find_lib(GMOCK_LIB libgmock.a)
else()
  uccl_find_lib(GLOG_LIB glog)
  uccl_find_lib(GFLAGS_LIB gflags)
  uccl_find_lib(GTEST_LIB gtest)
  uccl_find_lib(GTEST_MAIN_LIB gtest_main)
  uccl_find_lib(GMOCK_LIB gmock)
endif()

# glog without gflags: what the NCCL plugin links (see collective/).
add_library(uccl_glog_only INTERFACE)
target_include_directories(uccl_glog_only SYSTEM INTERFACE ${GLOG_INCLUDE_DIR})
target_compile_definitions(uccl_glog_only INTERFACE GLOG_CUSTOM_PREFIX_SUPPORT)
target_link_libraries(uccl_glog_only INTERFACE ${GLOG_LIB} Threads::Threads)

add_library(uccl_glog INTERFACE)
target_link_libraries(uccl_glog INTERFACE uccl_glog_only ${GFLAGS_LIB})
target_include_directories(uccl_glog SYSTEM INTERFACE ${GFLAGS_INCLUDE_DIR})

add_library(uccl_gtest INTERFACE)
target_include_directories(uccl_gtest SYSTEM INTERFACE ${GTEST_INCLUDE_DIR})
target_link_libraries(uccl_gtest INTERFACE ${GMOCK_LIB} ${GTEST_LIB} Threads::Threads)

add_library(uccl_boost INTERFACE)
target_include_directories(uccl_boost SYSTEM INTERFACE ${BOOST_LOCKFREE_DIR})

# rdma-core headers decide whether the verbs backend is compiled; the library
# itself is dlopen()ed at run time, so binaries run where it is absent.
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
if(UCCL_VERBS STREQUAL "AUTO")
  if(IBVERBS_INCLUDE_DIR)
    set(UCCL_HAVE_VERBS ON)
  else()
    set(UCCL_HAVE_VERBS OFF)
  endif()
elseif(UCCL_VERBS)
  if(NOT IBVERBS_INCLUDE_DIR)
    message(FATAL_ERROR "UCCL_VERBS=ON but infiniband/verbs.h not found "
                        "(apt-get install libibverbs-dev)")
  endif()
  set(UCCL_HAVE_VERBS ON)
else()
  set(UCCL_HAVE_VERBS OFF)
endif()

# CUDA: on when nvcc is found (PATH, CUDACXX or /usr/local/cuda).
set(UCCL_HAVE_CUDA OFF)
if(NOT UCCL_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # H100 / H200
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(UCCL_HAVE_CUDA ON)
  elseif(UCCL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "UCCL_CUDA=ON but nvcc was not found")
  endif()
endif()

# Debian's interpreter where there is one: Debian's pybind11, numpy and
# pytest are installed for it (another python3 may come first on PATH).
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python3 COMPONENTS Interpreter)
if(NOT DEFINED Python_EXECUTABLE AND Python3_EXECUTABLE)
  set(Python_EXECUTABLE ${Python3_EXECUTABLE})  # for pybind11's FindPython
endif()
