# blobnet build. `make` builds libblobnet.a, the blobnet CLI and the test runner;
# `make test` runs every test; `make train` builds the CLI and trains LeNet on MNIST.
# Every target builds the GPU code only where it can run: nvcc present and a GPU seen
# (/dev/nvidia0 or `nvidia-smi -L`). CUDA=1 builds it without a GPU, CPU_ONLY=1 (or CUDA=0)
# never does.

# One job per core unless -j says otherwise (a -j on the command line wins), but not beside
# a clean, which would race the build. Each step prints one short line; V=1 prints the whole
# commands.
ifeq ($(filter clean,$(MAKECMDGOALS)),)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif
ifeq ($(V),1)
  Q :=
  say :=
else
  Q := @
  say = printf '  %-5s %s\n' '$(1)' '$(2)';
endif

CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CC        ?= cc
BUILD     ?= build
NVIDIA_SMI ?= nvidia-smi
GPU_DEVICE ?= /dev/nvidia0

# A GPU build is worth its minutes of nvcc only where its code can run, and one BUILD folder
# holds one configuration, so `make`, `make test` and `make train` all decide alike.
gpu_seen = $(or $(wildcard $(GPU_DEVICE)),$(shell $(NVIDIA_SMI) -L 2>/dev/null | grep '^GPU '))
ifeq ($(CPU_ONLY),1)
  WITH_CUDA :=
else ifeq ($(CUDA),0)
  WITH_CUDA :=
else ifeq ($(CUDA),1)
  WITH_CUDA := 1
  ifeq ($(wildcard $(NVCC)),)
    $(error CUDA=1 but there is no nvcc at $(NVCC): set CUDA_HOME (or NVCC))
  endif
else
  WITH_CUDA := $(if $(wildcard $(NVCC)),$(if $(gpu_seen),1))
endif

# CUDA architectures, as compute capabilities ("90", "80 90"): machine code for each and PTX for
# the last, which newer chips compile when they load it. By default those of the GPUs present,
# else Hopper (H100/H200). Flags given whole (-gencode ...) are passed as they are.
ifeq ($(WITH_CUDA),1)
  ifeq ($(origin CUDA_ARCH),undefined)
    CUDA_ARCH := $(shell $(NVIDIA_SMI) --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | \
                         grep -E '^[0-9]+\.[0-9]+$$' | tr -d . | sort -n -u)
    CUDA_ARCH := $(or $(CUDA_ARCH),90)
  endif
  CUDA_ARCH_FLAGS := $(strip $(if $(filter -%,$(CUDA_ARCH)),$(CUDA_ARCH),\
      $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
      -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))))
endif

# cuDNN lives inside the CUDA tree on some machines and in the multiarch system paths on others.
CUDNN_INC := $(firstword $(dir $(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h /usr/include/cudnn.h)))
CUDNN_LIB := $(firstword $(dir $(wildcard $(CUDA_HOME)/lib64/libcudnn.so /usr/lib/x86_64-linux-gnu/libcudnn.so)))

# NCCL (several GPUs) is found like cuDNN; without nccl.h (or with NCCL=0) the build trains on
# one GPU at most.
NCCL_INC := $(firstword $(dir $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h)))
NCCL_LIB := $(firstword $(dir $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib64/libnccl.so) \
                                         $(CUDA_HOME)/lib64/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so)))
WITH_NCCL := $(if $(filter 0,$(NCCL)),,$(if $(WITH_CUDA),$(if $(NCCL_INC),$(if $(NCCL_LIB),1))))
# /usr/include is searched anyway; naming it with -I would reorder the system headers.
NCCL_FLAGS := -DBN_WITH_NCCL $(if $(filter /usr/include/,$(NCCL_INC)),,-I$(NCCL_INC))

# OpenBLAS: Debian and Ubuntu keep its cblas.h in a per-variant folder.
BLAS_INC := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include/x86_64-linux-gnu))

# NVTX v3 is header-only: its headers come with the CUDA toolkit; CPU-only builds use them too.
NVTX_INC := $(firstword $(dir $(wildcard $(CUDA_HOME)/include/nvtx3/nvToolsExt.h /usr/include/nvtx3/nvToolsExt.h)))

# A call without a declaration is an error, not a warning: built against another BLAS's cblas.h,
# which lacks OpenBLAS's own calls (openblas_get_corename), the program would take the pointer that
# call returns for an int and crash at its start.
WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror=implicit-function-declaration
OPT      ?= -O3
CPPFLAGS := -Isrc -Ilayers -Idatasets -Itests -I$(BUILD) -I$(BLAS_INC) -D_POSIX_C_SOURCE=200809L
CFLAGS   += -std=c11 $(OPT) -g $(WARN) -fno-strict-aliasing -MMD -MP
ifneq ($(NVTX_INC),)
  ifneq ($(NVTX),0)
    CPPFLAGS += -DBN_NVTX -I$(NVTX_INC)..
    NVTX_RECORDER := $(BUILD)/tests/libnvtx_record.so
  endif
endif
LDLIBS   := -lopenblas -lpng -lz -lm -lpthread -ldl

# JPEG through libjpeg-turbo when its header is there (Debian: libjpeg62-turbo-dev) and JPEG=0
# does not turn it off; without it, reading a JPEG is an error that says so.
WITH_JPEG := $(if $(filter 0,$(JPEG)),,$(if $(wildcard /usr/include/jpeglib.h /usr/local/include/jpeglib.h),1))
ifeq ($(WITH_JPEG),1)
  LDLIBS   += -ljpeg
else
  CPPFLAGS += -DBN_NO_JPEG
endif

ifeq ($(SANITIZE),1)
  CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=address,undefined
endif

# The library: src/ by concern (core, gpu, io, train, check; cli/ is the program), layers/ (a
# file pair per type, a folder for a type with kernel families), datasets/. A file X_none.c
# stands in for the .cu files of its folder in a build without CUDA; in src/dist, where the .cu
# file needs NCCL too, in a build without NCCL.
LIB_DIRS := src/core src/core/optimizers src/core/lr_policies src/gpu src/io src/train src/check src/dist layers $(filter-out layers/examples/,$(wildcard layers/*/)) datasets
C_SRCS   := $(foreach d,$(LIB_DIRS),$(wildcard $(d:%/=%)/*.c))
NONE_SRCS := $(filter %_none.c,$(C_SRCS))
C_SRCS   := $(filter-out $(NONE_SRCS),$(C_SRCS))
DIST_NONE := $(filter src/dist/%,$(NONE_SRCS))
NONE_SRCS := $(filter-out $(DIST_NONE),$(NONE_SRCS))
CLI_SRCS := $(wildcard src/cli/*.c)
CU_SRCS :=
ifeq ($(WITH_CUDA),1)
  CU_SRCS  := $(foreach d,$(LIB_DIRS),$(wildcard $(d:%/=%)/*.cu))
  CPPFLAGS += -DBN_WITH_CUDA -I$(CUDA_HOME)/include $(if $(CUDNN_INC),-I$(CUDNN_INC))
  LDLIBS   := -L$(CUDA_HOME)/lib64 $(if $(CUDNN_LIB),-L$(CUDNN_LIB)) \
              -lcudnn -lcudart $(LDLIBS) -lstdc++
  NVFLAGS  := -std=c++17 -O3 $(CUDA_ARCH_FLAGS) -lineinfo -Isrc -Ilayers -Idatasets \
              -I$(CUDNN_INC) -DBN_WITH_CUDA -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
  ifeq ($(WITH_NCCL),1)
    CPPFLAGS += $(NCCL_FLAGS)
    NVFLAGS  += $(NCCL_FLAGS)
    LDLIBS   := -L$(NCCL_LIB) -lnccl $(LDLIBS)
  else
    CU_SRCS  := $(filter-out src/dist/%,$(CU_SRCS))
    C_SRCS   += $(DIST_NONE)
  endif
else
  C_SRCS += $(NONE_SRCS) $(DIST_NONE)
endif

# The slowest C file to compile (its vector code three times over, core/cpu_vector.h: 14 s) first,
# so that a parallel build does not end waiting on it.
SLOW_C    := layers/conv2d/conv_winograd.c
LIB_OBJS  := $(patsubst %.c,$(BUILD)/%.o,$(SLOW_C) $(filter-out $(SLOW_C),$(C_SRCS))) $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
TEST_SRCS := $(wildcard tests/test_*.c) tests/runner.c
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)

# Layer plugins, kept out of the library: layers/examples/X.c (and X.cu with CUDA) make
# $(BUILD)/plugins/X.so. A plugin's bn_* calls resolve against the program that loads it, so
# the programs link the whole library and export its symbols (EXPORT_LIB).
PLUGINS     := $(patsubst layers/examples/%.c,$(BUILD)/plugins/%.so,$(wildcard layers/examples/*.c))
PLUGIN_CUS  := $(if $(WITH_CUDA),$(patsubst layers/examples/%.cu,$(BUILD)/plugins/%.so,$(wildcard layers/examples/*.cu)))
PLUGIN_LIBS := $(if $(WITH_CUDA),-L$(CUDA_HOME)/lib64 -lcudart)
EXPORT_LIB  := -rdynamic -Wl,--whole-archive libblobnet.a -Wl,--no-whole-archive

# The kernel tracer (tools/kernel_trace.c), a CUDA injection library on CUPTI: in a CUDA build
# where CUPTI's header and library are there. `make trace` says why when they are not.
CUPTI_LIB    := $(firstword $(dir $(wildcard $(CUDA_HOME)/lib64/libcupti.so $(CUDA_HOME)/extras/CUPTI/lib64/libcupti.so)))
CUPTI_INC    := $(firstword $(dir $(wildcard $(CUDA_HOME)/include/cupti.h $(CUDA_HOME)/extras/CUPTI/include/cupti.h)))
KERNEL_TRACE := $(if $(WITH_CUDA),$(if $(CUPTI_LIB),$(if $(CUPTI_INC),$(BUILD)/tools/libkernel_trace.so)))
.PHONY: test-seeds all test clean bench recipes plugins
all: libblobnet.a blobnet tests/run_tests $(NVTX_RECORDER) plugins $(KERNEL_TRACE)

# The top-level outputs are shared by every configuration (BUILD, CPU_ONLY, SANITIZE, NVTX):
# this file changes whenever the configuration does, so switching relinks them.
CONFIG_ID := $(BUILD) cuda=$(WITH_CUDA) nccl=$(WITH_NCCL) jpeg=$(WITH_JPEG) sanitize=$(SANITIZE) nvtx=$(NVTX) opt=$(OPT)
.build-config: FORCE
	@echo '$(CONFIG_ID)' | cmp -s - $@ 2>/dev/null || echo '$(CONFIG_ID)' > $@
.PHONY: FORCE

# The sources that read BN_NO_JPEG are recompiled when JPEG=0 comes or goes in the same BUILD.
$(addprefix $(BUILD)/,src/io/image_jpeg.o tests/test_image.o tests/test_folder.o tests/test_util_images.o): \
    $(BUILD)/jpeg-config
$(BUILD)/jpeg-config: FORCE
	@mkdir -p $(dir $@)
	@echo 'jpeg=$(WITH_JPEG)' | cmp -s - $@ 2>/dev/null || echo 'jpeg=$(WITH_JPEG)' > $@

# Every object of a BUILD folder is recompiled when CUDA or NCCL comes or goes there, or the
# CUDA architectures change: a build without a GPU then one with CUDA=1 do not mix.
$(LIB_OBJS) $(TEST_OBJS) $(CLI_SRCS:%.c=$(BUILD)/%.o) $(PLUGINS:.so=.o) $(PLUGIN_CUS:.so=.cu.o): $(BUILD)/cuda-config
$(BUILD)/cuda-config: FORCE
	@mkdir -p $(dir $@)
	@echo 'cuda=$(WITH_CUDA) nccl=$(WITH_NCCL) arch=$(CUDA_ARCH_FLAGS)' | cmp -s - $@ 2>/dev/null || \
	    echo 'cuda=$(WITH_CUDA) nccl=$(WITH_NCCL) arch=$(CUDA_ARCH_FLAGS)' > $@

libblobnet.a: $(LIB_OBJS) .build-config
	@rm -f $@
	$(Q)$(call say,AR,$@)ar rcs $@ $(filter %.o,$^)

blobnet: libblobnet.a $(CLI_SRCS:%.c=$(BUILD)/%.o)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(EXPORT_LIB) $(LDLIBS)

tests/run_tests: $(TEST_OBJS) libblobnet.a
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(EXPORT_LIB) $(LDLIBS)

plugins: $(PLUGINS)

# A plugin is relinked when the configuration changes: its .cu half comes and goes with CUDA.
$(PLUGINS): $(BUILD)/plugins/%.so: $(BUILD)/plugins/%.o .build-config
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -shared -o $@ $(filter %.o,$^) $(PLUGIN_LIBS)

$(PLUGIN_CUS): $(BUILD)/plugins/%.so: $(BUILD)/plugins/%.cu.o

$(BUILD)/plugins/%.o: layers/examples/%.c
	@mkdir -p $(dir $@)
	$(Q)$(call say,CC,$<)$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -c $< -o $@

$(BUILD)/plugins/%.cu.o: layers/examples/%.cu
	@mkdir -p $(dir $@)
	$(Q)$(call say,NVCC,$<)$(NVCC) $(NVFLAGS) -Xcompiler -fPIC -MMD -MP -c $< -o $@

# An NVTX injection library the tests load to record every range the CLI opens.
$(BUILD)/tests/libnvtx_record.so: tests/nvtx_record.c
	@mkdir -p $(dir $@)
	$(Q)$(call say,LD,$@)$(CC) -std=c11 -O2 -Wall -Wextra -fPIC -shared -I$(NVTX_INC).. $< -o $@ -ldl

.PHONY: trace
trace: $(KERNEL_TRACE)
	@$(if $(KERNEL_TRACE),:,echo "make trace: needs a CUDA build with CUPTI (cupti.h and libcupti.so under $(CUDA_HOME))"; exit 1)
$(BUILD)/tools/libkernel_trace.so: tools/kernel_trace.c
	@mkdir -p $(dir $@)
	$(Q)$(call say,LD,$@)$(CC) -std=c11 -O2 -Wall -Wextra -fPIC -shared -I$(CUPTI_INC) $< -o $@ \
	    -L$(CUPTI_LIB) -Wl,-rpath,$(CUPTI_LIB) -lcupti -lpthread

# The list of tests: every BN_TEST(name) in tests/test_*.c, regenerated when they change, and
# when one is added or removed: the files' names are kept in a stamp that is rewritten whenever
# they differ from it (a removed file changes no file the list depends on).
TEST_SOURCES := $(sort $(wildcard tests/test_*.c))
TEST_NAMES_STAMP := $(BUILD)/tests_files.txt
ifneq ($(MAKECMDGOALS),clean)
$(shell mkdir -p $(BUILD) && { echo '$(TEST_SOURCES)' | cmp -s - $(TEST_NAMES_STAMP) || \
	echo '$(TEST_SOURCES)' > $(TEST_NAMES_STAMP); })
endif
$(BUILD)/tests_list.h: $(TEST_SOURCES) $(TEST_NAMES_STAMP)
	@mkdir -p $(dir $@)
	@grep -ho 'BN_TEST([A-Za-z0-9_]*)' $(TEST_SOURCES) /dev/null | sed 's/BN_TEST(\(.*\))/X(\1)/' > $@.tmp
	@mv $@.tmp $@

$(BUILD)/tests/runner.o: $(BUILD)/tests_list.h

# The vector code of the Winograd and few-channel convolutions: a * b + c may be one fused operation.
# The Winograd file keeps line tables only (-g1): its full debug information took a third of its
# 21 s compile.
$(BUILD)/layers/conv2d/conv_winograd.o $(BUILD)/layers/conv2d/conv_few.o: CFLAGS += -ffp-contract=fast -Wno-psabi
$(BUILD)/layers/conv2d/conv_winograd.o: CFLAGS += -g1

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(Q)$(call say,CC,$<)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# BN_CODE_MODULE: the file's name, by which its kernels' first launch notes its module (gpu/pdl.cuh,
# gpu/code_load.cu).
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(Q)$(call say,NVCC,$<)$(NVCC) $(NVFLAGS) '-DBN_CODE_MODULE="$(basename $(notdir $<))"' -MMD -MP -c $< -o $@

# Tests read real MNIST from BLOBNET_TEST_DATA: by default the copy `make train` fetched into
# MNIST_DIR, when all four files are there. BLOBNET_MAKE is how the install test calls make
# with this build's settings.
BLOBNET_TEST_DATA ?= $(if $(strip $(foreach f,$(MNIST_FILES),$(if $(wildcard $(MNIST_DIR)/$(f) $(MNIST_DIR)/$(f).gz),,$(f)))),,$(abspath $(MNIST_DIR)))
export BLOBNET_TEST_DATA
test: all
	BLOBNET_CLI=./blobnet BLOBNET_NVTX_RECORDER=$(NVTX_RECORDER) BLOBNET_KERNEL_TRACER=$(KERNEL_TRACE) BLOBNET_PLUGINS=$(BUILD)/plugins \
	  BLOBNET_MAKE='$(MAKE) BUILD=$(BUILD) CPU_ONLY=$(CPU_ONLY) CUDA=$(if $(WITH_CUDA),1,0) SANITIZE=$(SANITIZE) NVTX=$(NVTX) NCCL=$(NCCL) CUDA_HOME=$(CUDA_HOME)' \
	  ./tests/run_tests $(TESTS)

# `make test` RUNS times (default 3), each with a fresh seed printed first; a failing run names
# its seed, which BLOBNET_TEST_SEED=<seed> make test repeats. The exit status is the worst run's.
RUNS ?= 3
test-seeds: all
	@failed=0; for run in $$(seq 1 $(RUNS)); do \
	    seed=$$(od -An -N6 -tu8 /dev/urandom | tr -d ' '); \
	    echo "== run $$run of $(RUNS): BLOBNET_TEST_SEED=$$seed"; \
	    BLOBNET_TEST_SEED=$$seed $(MAKE) --no-print-directory test || { failed=1; echo "== seed $$seed failed"; }; \
	done; exit $$failed

# The quick start: MNIST fetched into MNIST_DIR when it is not there, while the CLI builds,
# then LeNet trained.
MNIST_DIR   ?= data/mnist
EPOCHS      ?= 2
MNIST_FILES := train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte
mnist:
	@for f in $(MNIST_FILES); do \
	    [ -f $(MNIST_DIR)/$$f.gz ] || [ -f $(MNIST_DIR)/$$f ] || { tools/fetch_mnist.sh $(MNIST_DIR) && break; } || exit 1; \
	done

train: blobnet mnist
	@mkdir -p runs
	./blobnet train models/lenet.cfg --data $(MNIST_DIR) --epochs $(EPOCHS) \
	    --save runs/lenet.safetensors --log runs/lenet.csv --log-every 20

# make install PREFIX=DIR (default /usr/local; DESTDIR stages it): the CLI, the library, its
# headers in include/blobnet/, the model files, the example plugin with its recipe in
# share/blobnet/examples/ and two pkg-config files, all listed in
# share/blobnet/install-manifest.txt, which make uninstall follows (tools/install.sh).
PREFIX  ?= /usr/local
VERSION := $(shell sed -n 's/^\#define BLOBNET_VERSION "\(.*\)"/\1/p' src/cli/main.c)
# The headers of the library, in their folders under include/blobnet/ as under src/ (the CLI's
# own headers stay behind); datasets/idx.h, dataset.h and folder.h beside blobnet.h.
INSTALL_HEADERS := src/blobnet.h $(foreach d,core core/optimizers core/lr_policies gpu io train check dist,$(wildcard src/$(d)/*.h))
INSTALL_ITEMS   := bin/blobnet=blobnet lib/libblobnet.a=libblobnet.a lib/pkgconfig/blobnet.pc=$(BUILD)/blobnet.pc \
                   $(foreach h,$(INSTALL_HEADERS),include/blobnet/$(h:src/%=%)=$(h)) include/blobnet/idx.h=datasets/idx.h include/blobnet/dataset.h=datasets/dataset.h include/blobnet/folder.h=datasets/folder.h \
                   $(foreach m,$(wildcard models/*.cfg),share/blobnet/models/$(notdir $(m))=$(m)) \
                   lib/pkgconfig/blobnet-plugin.pc=$(BUILD)/blobnet-plugin.pc \
                   $(foreach e,$(wildcard layers/examples/*),share/blobnet/examples/$(notdir $(e))=$(e))
# A static library: its users link everything it needs, so all of it goes in Libs.
comma     := ,
PC_CFLAGS := $(strip -I$${includedir}/blobnet $(if $(WITH_CUDA),-DBN_WITH_CUDA))
PC_LIBS   := $(strip -L$${libdir} -lblobnet $(LDLIBS) $(if $(filter 1,$(SANITIZE)),-fsanitize=address$(comma)undefined))
# A plugin is a shared library whose bn_* calls resolve against the blobnet binary that loads
# it, so its Libs hold no libblobnet.a (whose objects are not position-independent: linked into
# a .so they fail with a TPOFF32 relocation), only the CUDA runtime its .cu file calls. In a
# CUDA build, nvcc and nvflags say how to compile that file (cuDNN's headers for cuda_check.h).
PLUGIN_PC_CFLAGS := $(strip -fPIC $(PC_CFLAGS) $(if $(WITH_CUDA),$(if $(CUDNN_INC),-I$(CUDNN_INC:%/=%))))
PLUGIN_PC_VARS   := $(if $(WITH_CUDA),'nvcc=$(NVCC)' 'nvflags=-std=c++17 -O3 $(CUDA_ARCH_FLAGS)')
# The lines of a pkg-config file: name, description, Cflags, Libs, variables of its own.
pc_lines = 'prefix=$(PREFIX)' 'exec_prefix=$${prefix}' 'libdir=$${exec_prefix}/lib' 'includedir=$${prefix}/include' \
           $(5) '' 'Name: $(1)' 'Description: $(2)' 'Version: $(VERSION)' 'Cflags: $(3)' 'Libs: $(4)'

install: blobnet libblobnet.a
	@mkdir -p $(BUILD)
	@printf '%s\n' $(call pc_lines,blobnet,a small deep-learning training framework in C on CUDA,$(PC_CFLAGS),$(PC_LIBS)) \
	    > $(BUILD)/blobnet.pc
	@printf '%s\n' $(call pc_lines,blobnet-plugin,build a layer plugin (.so) for the blobnet binary,$(PLUGIN_PC_CFLAGS),$(PLUGIN_LIBS),$(PLUGIN_PC_VARS)) \
	    > $(BUILD)/blobnet-plugin.pc
	@tools/install.sh install '$(DESTDIR)$(PREFIX)' $(INSTALL_ITEMS)

uninstall:
	@tools/install.sh uninstall '$(DESTDIR)$(PREFIX)'

.PHONY: mnist train install uninstall

# The model suite on the GPU beside its PyTorch peer (a benchmark, not a test):
# make bench [DATA=mnist-dir] [FASHION=fashion-mnist-dir] [MODELS="vgg_fashion ..."]
bench: all
	tools/bench.sh $(or $(DATA),$(BLOBNET_DATA),data/mnist) $(or $(FASHION),/usr/share/datasets/fashion-mnist) $(MODELS)

# The suite at each model file's whole recipe beside PyTorch, seed by seed (not a test either):
# make recipes [DATA=..] [FASHION=..] [MODELS=".."] [SEEDS="1 2 3"]
recipes: all
	RECIPES_SEEDS="$(or $(SEEDS),$(RECIPES_SEEDS),1 2)" tools/recipes.sh $(or $(DATA),$(BLOBNET_DATA),data/mnist) \
		$(or $(FASHION),/usr/share/datasets/fashion-mnist) $(MODELS)

clean:
	rm -rf $(BUILD) libblobnet.a blobnet tests/run_tests

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
