// Built outside ddp's tree against the installed package: two ranks (one
// thread each, explicit options instead of a launcher) all-reduce over Gloo.
#include <ATen/ATen.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <ddp/ddp.hpp>

#include <iostream>
#include <thread>

static int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

int main() {
  const int port = free_port();
  float results[2] = {0, 0};
  auto rank = [&](int r) {
    auto group = ddp::init(ddp::InitOptions()
                               .backend("gloo")
                               .rank(r)
                               .world_size(2)
                               .master_addr("127.0.0.1")
                               .master_port(port));
    at::Tensor t = at::full({8}, r + 1.0f);
    group->all_reduce(t, ddp::ReduceOp::kSum);
    results[r] = t[7].item<float>();
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  std::cout << "consumer: all_reduce(sum) = " << results[0] << ", " << results[1] << std::endl;
  return results[0] == 3.0f && results[1] == 3.0f ? 0 : 1;
}
