# Finds and enables CUDA if a toolkit is present (/usr/local/cuda by default),
# setting PREPFLOW_HAVE_CUDA. Included at the top of prepflow's build (CMake
# wants a language enabled in the directory above all its users) and of
# client/gpu's standalone build. -DPREPFLOW_DISABLE_CUDA=ON skips it.
include(CheckLanguage)
set(PREPFLOW_HAVE_CUDA OFF)
if(NOT PREPFLOW_DISABLE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere and Hopper as machine code, plus PTX for later GPUs.
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(PREPFLOW_HAVE_CUDA ON)
    endif()
  endif()
endif()
