# blobnet build. `make` builds libblobnet.a, the blobnet CLI and the test runner;
# `make test` runs every test; `make CPU_ONLY=1` builds without CUDA.

CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CC        ?= cc
BUILD     ?= build
# CUDA architectures to build for: Hopper (H100/H200) plus PTX for newer chips.
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90

ifeq ($(CPU_ONLY),1)
  WITH_CUDA :=
else
  WITH_CUDA := $(if $(wildcard $(NVCC)),1,)
endif

# cuDNN lives inside the CUDA tree on some machines and in the multiarch system paths on others.
CUDNN_INC := $(firstword $(dir $(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h /usr/include/cudnn.h)))
CUDNN_LIB := $(firstword $(dir $(wildcard $(CUDA_HOME)/lib64/libcudnn.so /usr/lib/x86_64-linux-gnu/libcudnn.so)))

# OpenBLAS: Debian and Ubuntu keep its cblas.h in a per-variant folder.
BLAS_INC := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include/x86_64-linux-gnu))

# NVTX v3 is header-only: its headers come with the CUDA toolkit; CPU-only builds use them too.
NVTX_INC := $(firstword $(dir $(wildcard $(CUDA_HOME)/include/nvtx3/nvToolsExt.h /usr/include/nvtx3/nvToolsExt.h)))

WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter
OPT      ?= -O2
CPPFLAGS := -Isrc -Ilayers -Idatasets -Itests -I$(BUILD) -I$(BLAS_INC) -D_POSIX_C_SOURCE=200809L
CFLAGS   += -std=c11 $(OPT) -g $(WARN) -fno-strict-aliasing -MMD -MP
ifneq ($(NVTX_INC),)
  ifneq ($(NVTX),0)
    CPPFLAGS += -DBN_NVTX -I$(NVTX_INC)..
    NVTX_RECORDER := $(BUILD)/tests/libnvtx_record.so
  endif
endif
LDLIBS   := -lopenblas -lz -lm -lpthread -ldl

ifeq ($(SANITIZE),1)
  CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=address,undefined
endif

C_SRCS  := $(wildcard src/*.c layers/*.c datasets/*.c)
CLI_SRCS := src/main.c src/cli.c $(wildcard src/cmd_*.c)
C_SRCS  := $(filter-out $(CLI_SRCS) src/device_none.c,$(C_SRCS))
CU_SRCS :=
ifeq ($(WITH_CUDA),1)
  CU_SRCS  := $(wildcard src/*.cu layers/*.cu)
  CPPFLAGS += -DBN_WITH_CUDA -I$(CUDA_HOME)/include $(if $(CUDNN_INC),-I$(CUDNN_INC))
  LDLIBS   := -L$(CUDA_HOME)/lib64 $(if $(CUDNN_LIB),-L$(CUDNN_LIB)) \
              -lcudnn -lcublas -lcurand -lcudart $(LDLIBS) -lstdc++
  NVFLAGS  := -std=c++17 -O3 $(CUDA_ARCH) -lineinfo -Isrc -Ilayers -Idatasets \
              -I$(CUDNN_INC) -DBN_WITH_CUDA -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
else
  C_SRCS += src/device_none.c
endif

LIB_OBJS  := $(C_SRCS:%.c=$(BUILD)/%.o) $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
TEST_SRCS := $(wildcard tests/test_*.c) tests/runner.c
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)

.PHONY: all test clean
all: libblobnet.a blobnet tests/run_tests $(NVTX_RECORDER)

libblobnet.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

blobnet: $(CLI_SRCS:%.c=$(BUILD)/%.o) libblobnet.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

tests/run_tests: $(TEST_OBJS) libblobnet.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# An NVTX injection library the tests load to record every range the CLI opens.
$(BUILD)/tests/libnvtx_record.so: tests/nvtx_record.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -fPIC -shared -I$(NVTX_INC).. $< -o $@ -ldl

# The list of tests: every BN_TEST(name) in tests/test_*.c, regenerated when they change.
$(BUILD)/tests_list.h: $(wildcard tests/test_*.c)
	@mkdir -p $(dir $@)
	@grep -ho 'BN_TEST([A-Za-z0-9_]*)' $^ /dev/null | sed 's/BN_TEST(\(.*\))/X(\1)/' > $@.tmp
	@mv $@.tmp $@

$(BUILD)/tests/runner.o: $(BUILD)/tests_list.h

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

# Tests read real MNIST from BLOBNET_TEST_DATA when it is set.
test: all
	BLOBNET_CLI=./blobnet BLOBNET_NVTX_RECORDER=$(NVTX_RECORDER) ./tests/run_tests $(TESTS)

clean:
	rm -rf $(BUILD) libblobnet.a blobnet tests/run_tests

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
