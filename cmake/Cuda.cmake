# The cuda transport and its kernels (src/runtime/cuda, src/kernels/cuda) build into a second
# library, symmflow_cuda, when a CUDA compiler is found (SYMMFLOW_CUDA=AUTO, the default) or when
# asked for (ON); OFF skips them. Without a GPU at run time its tests skip (tests/cuda).
# A toolkit installed from NVIDIA's wheels (nvcc in /usr/local/cuda, the libraries under
# site-packages/nvidia/cu13) has no libcublas.so / libnvrtc.so link names and no CUDA::cublas
# targets: make them from the wheel's versioned libraries and headers.
function(symmflow_find_cuda_wheel_libraries)
  if(TARGET CUDA::cublas AND TARGET CUDA::cublasLt AND TARGET CUDA::nvrtc)
    return()
  endif()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(NOT Python3_Interpreter_FOUND)
    return()
  endif()
  execute_process(COMMAND ${Python3_EXECUTABLE} -c
                  "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  OUTPUT_VARIABLE site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(root "${site}/nvidia/cu${CUDAToolkit_VERSION_MAJOR}")
  foreach(lib cublas cublasLt nvrtc)
    if(NOT TARGET CUDA::${lib})
      find_library(SYMMFLOW_WHEEL_${lib} NAMES lib${lib}.so.${CUDAToolkit_VERSION_MAJOR}
                   PATHS "${root}/lib" NO_DEFAULT_PATH)
      if(SYMMFLOW_WHEEL_${lib} AND EXISTS "${root}/include")
        add_library(CUDA::${lib} SHARED IMPORTED GLOBAL)
        set_target_properties(CUDA::${lib} PROPERTIES IMPORTED_LOCATION "${SYMMFLOW_WHEEL_${lib}}"
                              INTERFACE_INCLUDE_DIRECTORIES "${root}/include")
        message(STATUS "CUDA::${lib} from the wheel: ${SYMMFLOW_WHEEL_${lib}}")
      endif()
    endif()
  endforeach()
endfunction()

# cuDNN's fused attention (Note [cudnn attention] in src/kernels/cuda/attention/cudnn_attention.cpp): the
# frontend's header-only C++ API (the nvidia-cudnn-frontend wheel puts it in site-packages/include)
# and cudnn.h (nvidia-cudnn-cu13: site-packages/nvidia/cudnn/include). Nothing links libcudnn: it
# is opened on first use; the library folder found here is one of the places tried then.
function(symmflow_find_cudnn_frontend)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(hints)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c
                    "import sys, sysconfig; print(';'.join([sysconfig.get_paths()['purelib']] + sys.path))"
                    OUTPUT_VARIABLE hints OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  find_path(SYMMFLOW_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h
            HINTS $ENV{CUDNN_FRONTEND_INCLUDE} PATHS ${hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
  # The Python environment's cuDNN first (PyTorch's, the library a torch process loads: Note
  # [cudnn loading] refuses a library of another version than these headers), then the system's.
  find_path(SYMMFLOW_CUDNN_INCLUDE cudnn.h HINTS $ENV{CUDNN_INCLUDE}
            PATHS ${hints} PATH_SUFFIXES nvidia/cudnn/include NO_DEFAULT_PATH)
  find_path(SYMMFLOW_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  set(SYMMFLOW_CUDNN_FOUND OFF PARENT_SCOPE)
  if(SYMMFLOW_CUDNN_FRONTEND_INCLUDE AND SYMMFLOW_CUDNN_INCLUDE)
    set(SYMMFLOW_CUDNN_FOUND ON PARENT_SCOPE)
    get_filename_component(lib "${SYMMFLOW_CUDNN_INCLUDE}/../lib/libcudnn.so.9" ABSOLUTE)
    set(SYMMFLOW_CUDNN_LIBRARY_HINT "${lib}" PARENT_SCOPE)
    message(STATUS "cuDNN frontend found (${SYMMFLOW_CUDNN_FRONTEND_INCLUDE}, cudnn.h in "
                   "${SYMMFLOW_CUDNN_INCLUDE}): attention through cuDNN")
  else()
    message(STATUS "cuDNN frontend or cudnn.h not found: attention runs symmflow's own kernels "
                   "(pip install nvidia-cudnn-frontend nvidia-cudnn-cu13)")
  endif()
endfunction()

set(SYMMFLOW_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set(SYMMFLOW_CUDA_FOUND OFF)
if(NOT SYMMFLOW_CUDA STREQUAL "OFF" AND NOT SYMMFLOW_SANITIZE AND NOT SYMMFLOW_BUILD_FUZZ)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # Hopper (H100, H200): the GPUs these kernels are tuned for
    endif()
    enable_language(CUDA)
    # The .cu files are C++20 like the rest (a collective's .cu holds its `impl`, which includes the
    # registry headers: Note [one file per collective]). CMake 3.25 does not know how to ask nvcc
    # 13 for C++20, so src/CMakeLists.txt passes -std=c++20 itself and no standard is set here.
    find_package(CUDAToolkit REQUIRED)
    symmflow_find_cuda_wheel_libraries()
    if(TARGET CUDA::cublas AND TARGET CUDA::cublasLt AND TARGET CUDA::nvrtc)
      set(SYMMFLOW_CUDA_FOUND ON)
      symmflow_find_cudnn_frontend()
      message(STATUS "CUDA found (${CMAKE_CUDA_COMPILER_VERSION}): building the cuda backend")
    elseif(SYMMFLOW_CUDA STREQUAL "ON")
      message(FATAL_ERROR "SYMMFLOW_CUDA=ON but cuBLAS, cuBLASLt or NVRTC was not found (toolkit or "
                          "the nvidia-cublas / nvidia-cuda-nvrtc wheels: scripts/install-deps.sh)")
    else()
      message(STATUS "CUDA compiler found but not cuBLAS / NVRTC: the cuda backend is disabled")
    endif()
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      message(STATUS "NCCL found (${NCCL_LIBRARY}): the cuda bench measures NCCL beside symmflow")
    endif()
  elseif(SYMMFLOW_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SYMMFLOW_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "CUDA not found: the cuda backend is disabled")
  endif()
endif()
