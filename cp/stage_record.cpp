#include "cp/stage_record.hpp"

#include <cmath>

namespace gdnv::cp {
namespace {

const std::vector<std::int64_t>& columns_of(const StagePlan& p, StageCols c) {
  switch (c) {
    case StageCols::InProj:
      return p.in_proj;
    case StageCols::Conv:
      return p.conv;
    case StageCols::Q:
      return p.q;
    case StageCols::K:
      return p.k;
    case StageCols::V:
      return p.v;
    case StageCols::Heads:
      return p.heads;
    case StageCols::State:
      return p.state;
    case StageCols::Hidden:
      break;
  }
  throw Error("StageTap: hidden columns are the identity");
}

// x / sqrt(sum x^2 + eps) per row of dk, in the backend's arithmetic (fp64 for F64 storage, else fp32),
// rounded to the storage dtype like the core's own normalised q and k.
Tensor l2_normalised(const Tensor& x, std::int64_t dk, double eps) {
  Tensor out(DType::F64, x.shape());
  const bool f64 = x.dtype() == DType::F64;
  for (std::int64_t r = 0; r < x.numel() / dk; ++r) {
    double sum = 0;
    float sum32 = 0;
    for (std::int64_t j = 0; j < dk; ++j) {
      const double v = x.get(r * dk + j);
      sum += v * v;
      sum32 += static_cast<float>(v) * static_cast<float>(v);
    }
    for (std::int64_t j = 0; j < dk; ++j) {
      const double v = x.get(r * dk + j);
      out.set(r * dk + j,
              f64 ? v / std::sqrt(sum + eps) : static_cast<float>(v) / std::sqrt(sum32 + static_cast<float>(eps)));
    }
  }
  return out.to(x.dtype()).to(DType::F64);
}

}  // namespace

void StageTap::operator()(std::string_view name, const Buffer& data, StageRows rows, StageCols cols,
                          std::int64_t row) const {
  if (!recorder) return;
  const StagePlan& p = *plan;
  const bool backward = name.starts_with("stage_grad::");
  StageRecord r;
  r.name = std::string(name);
  r.data = data;
  if (cols == StageCols::Hidden) {
    const std::int64_t width = data.numel() / static_cast<std::int64_t>(p.proj_rows.size());
    for (std::int64_t j = 0; j < width; ++j) r.cols.push_back(j);
    r.replicated_over_tp = p.replicated_over_tp;
  } else {
    r.cols = columns_of(p, cols);
  }
  if (rows == StageRows::Boundary) {
    r.rows = {row};
  } else {
    r.rows = rows == StageRows::Proj ? p.proj_rows : p.mixer_rows;
    r.sum = backward && p.sum_backward;
    if (!backward && !p.own_rows.empty()) r.take = r.rows = p.own_rows;  // all_gather: rows computed = natural
  }
  if (name == "stage::q" || name == "stage::k") r.l2_eps = p.l2_eps;
  recorder->records.push_back(std::move(r));
}

std::vector<HostStage> download_stages(Backend& be, const StageRecorder& recorder) {
  std::vector<HostStage> out;
  for (const StageRecord& r : recorder.records) {
    const auto width = static_cast<std::int64_t>(r.cols.size());
    Tensor t = be.download(r.data);
    if (r.l2_eps >= 0) t = l2_normalised(t, t.dim(-1), r.l2_eps);
    t = t.to(DType::F64).reshaped({t.numel() / width, width});
    if (!r.take.empty()) {
      Tensor kept(DType::F64, {static_cast<std::int64_t>(r.take.size()), width});
      for (std::size_t i = 0; i < r.take.size(); ++i)
        for (std::int64_t j = 0; j < width; ++j)
          kept.set(static_cast<std::int64_t>(i) * width + j, t.get(r.take[i] * width + j));
      t = std::move(kept);
    }
    out.push_back({r.name, std::move(t), r.rows, r.cols, r.sum, r.replicated_over_tp});
  }
  return out;
}

}  // namespace gdnv::cp
