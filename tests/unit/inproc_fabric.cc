extern const char* const kRdmasanTestFabric = "inproc";
