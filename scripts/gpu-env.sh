# scripts/gpu-env.sh: sourced by scripts/gpu-check.sh. Points the loader at the bundle's
# libraries and Open MPI (build-gpu/sysroot, made by scripts/gpu-bundle.sh) when it is there, and
# at the CUDA libraries the machine has: its toolkit, or the NVIDIA wheels beside its PyTorch.
zt_sys=$PWD/build-gpu/sysroot
# StarPU with CUDA first: Debian's StarPU (no CUDA) has the same soname (PLATFORM.md item 4)
export LD_LIBRARY_PATH=$PWD/build-cuda/starpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -d "$zt_sys/usr/lib/x86_64-linux-gnu" ]; then
  zt_lib=$zt_sys/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$zt_lib:$zt_lib/openmpi/lib:$zt_lib/openblas-pthread:$zt_lib/pmix2/lib
  export PATH=$zt_sys/usr/bin:$PATH
  # Open MPI and PMIx find their plugins and help texts under these prefixes, not /usr
  export OPAL_PREFIX=$zt_sys/usr PMIX_INSTALL_PREFIX=$zt_lib/pmix2
  export OMPI_MCA_mca_base_component_show_load_errors=0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# a directory for each CUDA library the GPU build loads, first match wins
ZT_CUDA_LIBDIRS=
for zt_want in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcusparse.so.12 \
               libnvJitLink.so.13; do
  for zt_d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
              /usr/local/lib /usr/lib/x86_64-linux-gnu \
              $(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
                      /usr/local/lib/python3*/dist-packages/nvidia/*/lib \
                      /usr/lib/python3/dist-packages/nvidia/*/lib 2>/dev/null); do
    if [ -e "$zt_d/$zt_want" ]; then
      case ":$ZT_CUDA_LIBDIRS:" in *":$zt_d:"*) ;; *) ZT_CUDA_LIBDIRS=$ZT_CUDA_LIBDIRS:$zt_d ;; esac
      break
    fi
  done
done
ZT_CUDA_LIBDIRS=${ZT_CUDA_LIBDIRS#:}
[ -n "$ZT_CUDA_LIBDIRS" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$ZT_CUDA_LIBDIRS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=$PATH:/usr/local/cuda/bin
unset zt_sys zt_lib zt_want zt_d
