# ROCm handler: built when CMake finds a HIP compiler (MUSE_ATTN_HIP=AUTO; a ROCm install, e.g.
# /opt/rocm, or -DCMAKE_HIP_COMPILER=...) or required (ON), and the CUDA handler is not built (one
# GPU vendor a build). The same sources as the CUDA handler, compiled as HIP (gpu/vendor.h
# switches on __HIPCC__).
if(NOT MUSE_ATTN_HIP STREQUAL "OFF")
  include(CheckLanguage)
  check_language(HIP)
  if(CMAKE_HIP_COMPILER AND TARGET muse_attn_cuda)
    # Both handlers define the same launchers (namespace muse_attn::gpu): one vendor a build.
    if(MUSE_ATTN_HIP STREQUAL "ON")
      message(FATAL_ERROR "MUSE_ATTN_HIP=ON with the CUDA handler also built: pass MUSE_ATTN_CUDA=OFF")
    endif()
    message(STATUS "jax_muse_attn: a HIP compiler too, but the CUDA handler is built: ROCm handler not built")
  elseif(CMAKE_HIP_COMPILER)
    if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
      set(CMAKE_HIP_ARCHITECTURES "gfx942;gfx950")
    endif()
    enable_language(HIP)
    set(CMAKE_HIP_STANDARD 17)
    file(GLOB MUSE_ATTN_HIP_KERNELS CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/gpu/*.cu.cc")
    set(MUSE_ATTN_HIP_SOURCES ${MUSE_ATTN_HIP_KERNELS} gpu/verify_attention_gpu.cc gpu/device_query.cc
        gpu/device_clock_gpu.cc)
    set_source_files_properties(${MUSE_ATTN_HIP_SOURCES} PROPERTIES LANGUAGE HIP)
    add_library(muse_attn_hip OBJECT ${MUSE_ATTN_HIP_SOURCES})
    target_link_libraries(muse_attn_hip PRIVATE muse_attn_core)
    target_compile_definitions(muse_attn_hip PRIVATE MUSE_ATTN_WITH_HIP)
    # -ffast-math implies -ffinite-math-only, under which clang deletes the kernels' -inf tests
    # (muse_attn/softmax_state.h refuses to compile so): infinities are kept.
    target_compile_options(muse_attn_hip PRIVATE $<$<COMPILE_LANGUAGE:HIP>:-O3 -ffast-math -fno-finite-math-only>)
    # The HIP runtime (libamdhip64): the target enable_language(HIP) made (ROCm's hip-lang), else
    # the library wherever it is.
    if(TARGET hip-lang::amdhip64)
      set(MUSE_ATTN_HIP_RUNTIME hip-lang::amdhip64)
    else()
      find_library(MUSE_ATTN_HIP_RUNTIME amdhip64 HINTS ENV ROCM_PATH PATH_SUFFIXES lib lib64)
      if(NOT MUSE_ATTN_HIP_RUNTIME)
        message(FATAL_ERROR "jax_muse_attn: a HIP compiler but no HIP runtime (libamdhip64) found")
      endif()
    endif()
    target_link_libraries(_muse_attn PRIVATE muse_attn_hip ${MUSE_ATTN_HIP_RUNTIME})
    target_compile_definitions(_muse_attn PRIVATE MUSE_ATTN_WITH_HIP)
    message(STATUS "jax_muse_attn: ROCm handler for ${CMAKE_HIP_ARCHITECTURES}")
  elseif(MUSE_ATTN_HIP STREQUAL "ON")
    message(FATAL_ERROR "MUSE_ATTN_HIP=ON but no HIP compiler was found (set CMAKE_HIP_COMPILER "
                        "or ROCM_PATH)")
  else()
    message(STATUS "jax_muse_attn: no HIP compiler, ROCm handler not built")
  endif()
endif()
