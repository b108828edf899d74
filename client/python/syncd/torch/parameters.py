"""Parameter names as horovod.torch's optimizers check and make them."""


def parameter_names(param_groups, named_parameters):
    """Each parameter's name, as Horovod checks and makes them: `named_parameters` (tuples, unique
    names, every parameter named) or, without it, group index and index within the group."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (g, i), v)
                            for g, param_group in enumerate(param_groups)
                            for i, v in enumerate(param_group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [k for k, _ in named_parameters]
    dups = sorted({k for k in names if names.count(k) > 1})
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s" %
                         ", ".join(dups))
    all_ids = {id(v) for group in param_groups for v in group["params"]}
    unnamed = all_ids - {id(v) for _, v in named_parameters}
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters were not "
                         "named. Python object ids: %s" % ", ".join(str(i) for i in unnamed))
    return {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
