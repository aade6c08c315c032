#include <iostream>

#include "cli/command.hpp"

int main(int argc, char** argv) { return gdnv::cli::run_cli(argc, argv, std::cout, std::cerr); }
