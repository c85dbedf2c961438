{
  "targets": [
    {
      "target_name": "offload_mpi",
      "sources": ["offload_mpi.c"],
      "cflags": ["-O2", "-Wall", "<!@(mpicc --showme:compile)"],
      "libraries": ["<!@(mpicc --showme:link)"]
    }
  ]
}
