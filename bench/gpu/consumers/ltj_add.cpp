// ltj_add.cpp - a small program on libtriton_jit's API for bench/gpu/consumers-proof.sh: the
// library's own tensor-add example operator (examples/pointwise: my_ops::add_tensor, which calls
// TritonJITFunction::get_instance("add.py", "binary_pointwise_kernel")) on seeded inputs, so
// that two processes (a cold cache, a tkm-mounted one) must print the same bytes. Built inside
// the libtriton_jit tree by the script (added to examples/pointwise/CMakeLists.txt there), run
// from that build's examples/pointwise (add.py is found relative to the working directory).
// Prints one JSON line: ok (result == at::add bit for bit), n, sum, fnv1a of the result's bytes.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "add_op.h"
#include "torch/torch.h"

int main()
{
    torch::manual_seed(0);
    const int64_t n = 128 * 1024; // the shape of the example's own test (test_add.cpp, "basic")
    at::Tensor a = at::rand({n}, at::kCUDA);
    at::Tensor b = at::rand({n}, at::kCUDA);
    at::Tensor r = my_ops::add_tensor(a, b);
    at::Tensor e = at::add(a, b);
    const bool ok = torch::equal(r, e);
    at::Tensor host = r.contiguous().cpu();
    const auto *p = static_cast<const unsigned char *>(host.data_ptr());
    uint64_t h = 1469598103934665603ULL; // FNV-1a, 64 bit
    for (int64_t i = 0; i < host.numel() * static_cast<int64_t>(host.element_size()); i++) {
        h = (h ^ p[i]) * 1099511628211ULL;
    }
    std::printf("{\"ok\": %s, \"n\": %lld, \"sum\": %.9g, \"fnv1a\": \"%016llx\"}\n",
                ok ? "true" : "false", static_cast<long long>(n), host.sum().item<double>(),
                static_cast<unsigned long long>(h));
    return ok ? 0 : 1;
}
