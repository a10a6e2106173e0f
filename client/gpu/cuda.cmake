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
      # Machine code for every architecture CUDA 13 supports (Turing to
      # Blackwell), and PTX for the oldest, which the driver compiles for GPUs
      # newer than this toolkit. DeviceNormalizer::Create checks that the
      # kernel can run on the device and says so if not.
      set(CMAKE_CUDA_ARCHITECTURES 75 80-real 86-real 89-real 90-real 100-real 120-real)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(PREPFLOW_HAVE_CUDA ON)
    endif()
  endif()
endif()
