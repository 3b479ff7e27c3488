extern const char* const kRdmasanTestFabric = "unit-peer";
