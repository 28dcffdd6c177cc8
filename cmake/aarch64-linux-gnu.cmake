# CMake toolchain for linux/arm64 with Debian's cross toolchain (crossbuild-essential-arm64)
# and the :arm64 multiarch -dev packages (hack/deps.sh --arm64). Used by hack/cross-arm64.sh:
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# pkg-config looks only in the arm64 multiarch dirs, so every pkg_check_modules() in
# CMakeLists.txt resolves to the arm64 library; tests run under qemu-aarch64 (CROSSCOMPILING_EMULATOR).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(TKM_CROSS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${TKM_CROSS_TRIPLET}-gcc)
set(CMAKE_AR ${TKM_CROSS_TRIPLET}-ar CACHE FILEPATH "")
set(CMAKE_RANLIB ${TKM_CROSS_TRIPLET}-ranlib CACHE FILEPATH "")
set(CMAKE_STRIP ${TKM_CROSS_TRIPLET}-strip CACHE FILEPATH "")

# Debian's multiarch layout: headers in /usr/include (+ /usr/include/aarch64-linux-gnu),
# libraries in /usr/lib/aarch64-linux-gnu, the cross libc in /usr/aarch64-linux-gnu.
set(CMAKE_FIND_ROOT_PATH /usr/${TKM_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_LIBRARY_ARCHITECTURE ${TKM_CROSS_TRIPLET})

set(PKG_CONFIG_EXECUTABLE /usr/bin/${TKM_CROSS_TRIPLET}-pkg-config CACHE FILEPATH "")
if(NOT EXISTS ${PKG_CONFIG_EXECUTABLE})
  set(PKG_CONFIG_EXECUTABLE /usr/bin/pkg-config CACHE FILEPATH "" FORCE)
endif()
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${TKM_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# ctest runs the arm64 test binaries through qemu-user. The loader and libc at run time are the
# multiarch libc6:arm64 ones (/lib/ld-linux-aarch64.so.1 -> /usr/lib/aarch64-linux-gnu, pulled in
# by the :arm64 -dev packages), so the prefix is / and not /usr/aarch64-linux-gnu: with
# `-L /usr/aarch64-linux-gnu` qemu loads the cross package's ld.so (libc6-arm64-cross, another
# glibc build) but ld.so finds libc.so.6 in /usr/lib/aarch64-linux-gnu, and the two disagree on
# the layout of _rtld_global (GLIBC_PRIVATE): the child of every fork() spins forever in
# __libc_fork walking the stack list at the wrong offset (docs/development.md).
find_program(TKM_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(TKM_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${TKM_QEMU_AARCH64};-L;/)
endif()
