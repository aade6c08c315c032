#include <iostream>

#include "cli/command.hpp"
#include "core/memory.hpp"

int main(int argc, char** argv) {
  gdnv::keep_freed_memory();
  return gdnv::cli::run_cli(argc, argv, std::cout, std::cerr);
}
