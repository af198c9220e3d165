"""Weight palettization: an exact weighted 1-D k-means for per-grouped-channel LUTs (`kmeans_exact`) and a drop-in
route that emits coremltools' own `constexpr_lut_to_dense` ops from it (`fast_palettizer`)."""
