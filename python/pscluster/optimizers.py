"""PS-side optimizers and initializers: each variable is created on the PS
with one, and the PS applies the gradients pushed to it (protos/ps.proto
OptimizerProto, InitializerProto). Unlike TF, the optimizer runs on the PS,
so `optimizer.apply_gradients` is only a push of the gradients; each
variable's own optimizer applies them.
"""


def _text(type_, fields):
    parts = [f'type: "{type_}"']
    for k, v in fields.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        parts.append(f"{k}: {v}")
    return " ".join(parts)


class Optimizer:
    type = None

    def __init__(self, learning_rate, **fields):
        if not float(learning_rate) > 0:
            raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
        self.learning_rate = float(learning_rate)
        self._fields = fields

    def proto_text(self):
        return _text(self.type, {"learning_rate": self.learning_rate, **self._fields})

    def apply_gradients(self, grads_and_vars):
        """TF's shape: one push (step) of (gradient, variable) pairs; each
        variable's PS-side optimizer applies its gradient."""
        from pscluster._variables import apply_gradients
        apply_gradients(grads_and_vars)

    def __repr__(self):
        return f"{type(self).__name__}({self.proto_text()})"


class SGD(Optimizer):
    type = "sgd"

    def __init__(self, learning_rate=0.01):
        super().__init__(learning_rate)


class Momentum(Optimizer):
    type = "momentum"

    def __init__(self, learning_rate=0.01, momentum=0.9, nesterov=False):
        super().__init__(learning_rate, momentum=float(momentum), nesterov=bool(nesterov))


class Adagrad(Optimizer):
    type = "adagrad"

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7):
        super().__init__(learning_rate, initial_accumulator_value=float(initial_accumulator_value),
                         epsilon=float(epsilon))


class Adam(Optimizer):
    type = "adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
        super().__init__(learning_rate, beta1=float(beta_1), beta2=float(beta_2),
                         epsilon=float(epsilon))


class Ftrl(Optimizer):
    type = "ftrl"

    def __init__(self, learning_rate=0.001, learning_rate_power=-0.5,
                 initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0, beta=0.0):
        super().__init__(learning_rate, learning_rate_power=float(learning_rate_power),
                         initial_accumulator_value=float(initial_accumulator_value),
                         l1=float(l1_regularization_strength),
                         l2=float(l2_regularization_strength), beta=float(beta))


class Initializer:
    """A PS-side initializer: "zeros", "ones", "constant" (value),
    "random_uniform" (minval, maxval), "random_normal" (mean, stddev),
    "glorot_uniform"; seed for the random ones."""

    def __init__(self, type_, **fields):
        self.type = type_
        self._fields = fields

    def proto_text(self):
        return _text(self.type, self._fields)

    def __repr__(self):
        return f"Initializer({self.proto_text()})"


def Zeros():
    return Initializer("zeros")


def Ones():
    return Initializer("ones")


def Constant(value):
    return Initializer("constant", value=float(value))


def RandomUniform(minval=-0.05, maxval=0.05, seed=None):
    return Initializer("random_uniform", minval=float(minval), maxval=float(maxval), seed=seed)


def RandomNormal(mean=0.0, stddev=0.05, seed=None):
    return Initializer("random_normal", mean=float(mean), stddev=float(stddev), seed=seed)


def GlorotUniform(seed=None):
    return Initializer("glorot_uniform", seed=seed)


_BY_NAME = {"zeros": Zeros, "ones": Ones, "random_uniform": RandomUniform,
            "uniform": RandomUniform, "random_normal": RandomNormal, "normal": RandomNormal,
            "glorot_uniform": GlorotUniform}


def initializer_text(initializer):
    if isinstance(initializer, Initializer):
        return initializer.proto_text()
    if isinstance(initializer, str):
        if initializer not in _BY_NAME:
            raise ValueError(f"unknown initializer {initializer!r}; known: "
                             f"{', '.join(sorted(_BY_NAME))} (or pscluster.initializers.*)")
        return _BY_NAME[initializer]().proto_text()
    raise TypeError(f"initializer must be a name or pscluster.initializers.*, not "
                    f"{initializer!r} (values are initialized on the PS)")
