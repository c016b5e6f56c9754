"""PS-side initializers (pscluster.optimizers holds their definitions)."""

from pscluster.optimizers import (Constant, GlorotUniform, Initializer, Ones,  # noqa: F401
                                  RandomNormal, RandomUniform, Zeros)
