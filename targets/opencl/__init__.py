"""The OpenCL target: lowering graph- and kernel-level IR to OpenCL C plus a host plan (`lower`), and
running that plan with pyopencl (`runtime`)."""
