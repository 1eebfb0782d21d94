// unillm's entry point: everything lives in cli/app.cpp so tests can call it in-process.
#include "cli/app.h"

int main(int argc, char** argv) { return unillm::cli::run(argc, argv); }
