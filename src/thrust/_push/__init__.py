"""Internals of `thrust.PushConsumer`: the io drivers around the pure `thrust._core` decisions."""
