"""Example suite for pytest-devmem: small real JAX and TensorFlow models, measured per test."""
