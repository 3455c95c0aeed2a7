"""Instance and scenario generators and the benchmark harness."""
