// NVIDIA's cudnn-frontend builds its SDPA forward or backward graph for tinytrain's layouts
// (q, k, v over the packed (B,T,3C) qkv; o and dO (B,T,C); B2 T64 NH4 HS32), without a GPU:
// sm_version set by hand and no handle, as far as cuDNN's operation graph. Run it with cuDNN's
// API log on (CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=<file>) and tools/cudnn_api_ops.py lists
// every descriptor attribute of the graph, to compare with kernels/cudnn/sdpa_graphs.cpp's
// (docs/kernels.md, "Against cudnn-frontend"). Not part of the build: it needs the frontend's
// headers (github.com/NVIDIA/cudnn-frontend, include/). Build and run, from the repository root:
//   g++ -std=c++17 -I<frontend>/include -I<cuda>/include tools/cudnn_frontend_sdpa.cpp
//       -L<cuda>/lib -lcudnn -lcudart -o cudnn_frontend_sdpa      (one command)
//   cudnn_frontend_sdpa fwd|bwd full|causal <dropout p> bf16|fp16
#include <cudnn_frontend.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s fwd|bwd full|causal <dropout p> bf16|fp16\n", argv[0]);
    return 2;
  }
  const bool backward = std::string(argv[1]) == "bwd";
  const bool causal = std::string(argv[2]) == "causal";
  const float dropout_p = std::strtof(argv[3], nullptr);
  const fe::DataType_t io = std::string(argv[4]) == "fp16" ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
  const int64_t B = 2, NH = 4, T = 64, HS = 32, C = NH * HS;

  fe::graph::Graph graph;
  graph.set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  graph.set_sm_version(90);  // no device to ask
  auto tensor = [&](const char* name, int64_t uid, int64_t row_stride) {
    return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, NH, T, HS})
                            .set_stride({T * row_stride, HS, row_stride, 1}));
  };
  auto scalar = [&](const char* name, int64_t uid) {
    return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({1, 1, 1, 1})
                            .set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::INT64));
  };
  TensorPtr q = tensor("q", 1, 3 * C), k = tensor("k", 2, 3 * C), v = tensor("v", 3, 3 * C);
  TensorPtr seed, offset;  // cuDNN's Philox seed and offset, int64 device scalars
  if (dropout_p > 0) {
    seed = scalar("seed", 10);
    offset = scalar("offset", 11);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  if (!backward) {
    auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
    if (causal) options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    if (dropout_p > 0) options.set_dropout(dropout_p, seed, offset);
    auto [o, stats] = graph.sdpa(q, k, v, options);
    o->set_output(true).set_uid(4).set_dim({B, NH, T, HS}).set_stride({T * C, HS, C, 1});
    stats->set_output(true).set_uid(5).set_data_type(fe::DataType_t::FLOAT);
  } else {
    TensorPtr o = tensor("o", 4, C), dout = tensor("dO", 6, C);
    TensorPtr stats = graph.tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(5).set_dim({B, NH, T, 1})
                                       .set_stride({NH * T, T, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
    // deterministic: dQ written by its matmul, as tinytrain's graph does
    auto options = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(scale)
                       .set_deterministic_algorithm(true);
    if (causal) options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    if (dropout_p > 0) options.set_dropout(dropout_p, seed, offset);
    auto [dq, dk, dv] = graph.sdpa_backward(q, k, v, o, dout, stats, options);
    int64_t uid = 7;
    for (const TensorPtr& d : {dq, dk, dv})
      d->set_output(true).set_uid(uid++).set_dim({B, NH, T, HS}).set_stride({T * 3 * C, HS, 3 * C, 1});
  }
  fe::error_t status = graph.validate();
  if (status.is_good()) status = graph.build_operation_graph(nullptr);
  if (!status.is_good()) std::fprintf(stderr, "cudnn-frontend: %s\n", status.get_message().c_str());
  return status.is_good() ? 0 : 1;
}
