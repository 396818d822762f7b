"""Operating the project on real machines: pricing runs from measured rates (:mod:`.pricing`),
launching them on time-limited GPU machines (:mod:`.launcher`, its library :mod:`.windows`, the
machines :mod:`.machines`) and the benchmark that measures the rates (:mod:`.bench`). Nothing
below this package imports it.
"""
