// Built outside ddp's tree against the installed package, linking ddp::data
// and ddp::training: writes a tiny idx file and a metrics CSV into a scratch
// directory and reads both back.
#include <ATen/ATen.h>
#include <ddp/data/idx.hpp>
#include <ddp/training/metrics_csv.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  // idx: magic 0x00000801 (unsigned bytes, one dimension), 3 elements.
  const std::string idx = dir + "/three.idx";
  {
    std::ofstream out(idx, std::ios::binary);
    const unsigned char bytes[] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9};
    out.write(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  }
  const at::Tensor values = ddp::data::read_idx(idx);
  const bool idx_ok =
      values.numel() == 3 && values[0].item<int>() == 7 && values[2].item<int>() == 9;

  const std::string csv = dir + "/metrics.csv";
  {
    ddp::training::MetricsCsv metrics(csv);
    metrics.append({1, 0.5, 0.875, 100.0, 2.0});
  }
  const auto rows = ddp::training::read_metrics_csv(csv);
  const bool csv_ok = rows.size() == 1 && rows[0].epoch == 1 && rows[0].accuracy == 0.875;
  std::cout << "consumer_data_training: idx " << (idx_ok ? "ok" : "WRONG") << ", metrics csv "
            << (csv_ok ? "ok" : "WRONG") << std::endl;
  return idx_ok && csv_ok ? 0 : 1;
}
