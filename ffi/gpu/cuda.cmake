# CUDA handler: built when nvcc is found (MUSE_ATTN_CUDA=AUTO) or required (ON).
if(NOT MUSE_ATTN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_90a SASS (the warpgroup MMA, warp_mma.h; H100 / H200) and compute_90 PTX, which the
      # driver compiles for newer GPUs (there the mma.sync path: sm_90a code runs on sm_90 only).
      set(CMAKE_CUDA_ARCHITECTURES "90a-real;90-virtual")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
    file(GLOB MUSE_ATTN_GPU_KERNELS CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/gpu/*.cu.cc")
    set(MUSE_ATTN_GPU_SOURCES ${MUSE_ATTN_GPU_KERNELS} gpu/verify_attention_gpu.cc gpu/device_query.cc
        gpu/device_clock_gpu.cc)
    if(MUSE_ATTN_GPU_KERNELS)
      set_source_files_properties(${MUSE_ATTN_GPU_SOURCES} PROPERTIES LANGUAGE CUDA)
      add_library(muse_attn_cuda OBJECT ${MUSE_ATTN_GPU_SOURCES})
      target_link_libraries(muse_attn_cuda PRIVATE muse_attn_core)
      target_compile_definitions(muse_attn_cuda PRIVATE MUSE_ATTN_WITH_CUDA)
      target_compile_options(muse_attn_cuda PRIVATE
        $<$<COMPILE_LANGUAGE:CUDA>:-O3 --use_fast_math -Xptxas=-warn-spills>)
      find_package(CUDAToolkit REQUIRED)
      target_link_libraries(_muse_attn PRIVATE muse_attn_cuda CUDA::cudart_static)
      # The architectures, for Python (module.cc: cuda_architectures; "90a-real,90-virtual" by
      # default): tests ask whether sm_90a's code is in the build.
      string(REPLACE ";" "," MUSE_ATTN_CUDA_ARCH_LIST "${CMAKE_CUDA_ARCHITECTURES}")
      target_compile_definitions(_muse_attn PRIVATE MUSE_ATTN_WITH_CUDA
                                 MUSE_ATTN_CUDA_ARCHITECTURES="${MUSE_ATTN_CUDA_ARCH_LIST}")
      # _muse_attn was created before CUDA was enabled, so it did not inherit the architectures.
      set_target_properties(_muse_attn PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
      message(STATUS "jax_muse_attn: CUDA handler for sm_${CMAKE_CUDA_ARCHITECTURES}")
    endif()
  elseif(MUSE_ATTN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MUSE_ATTN_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "jax_muse_attn: no CUDA compiler, CUDA handler not built")
  endif()
endif()
