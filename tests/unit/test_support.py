"""tests/support.py itself: what every suite's waits and loops rely on."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import CertificateAuthority, run, self_signed, until, wait_until


def test_run_takes_a_coroutine_or_a_function_returning_one() -> None:
    async def answer() -> int:
        return 42

    assert run(answer()) == 42
    assert run(answer) == 42


def test_run_fails_when_a_thrust_task_outlives_the_scenario_unless_told_not_to_check() -> None:
    async def leaves_a_task() -> None:
        asyncio.get_running_loop().create_task(asyncio.sleep(3600), name="thrust-leftover")

    with pytest.raises(AssertionError, match="tasks outlived close"):
        run(leaves_a_task)
    run(leaves_a_task, check_tasks=False)


def test_until_returns_once_the_condition_holds_or_the_event_is_set() -> None:
    async def scenario() -> None:
        flag: list[int] = []
        event = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.call_soon(flag.append, 1)
        loop.call_soon(event.set)
        await until(lambda: flag)
        await until(event)

    run(scenario)


def test_until_and_wait_until_fail_naming_what_was_awaited() -> None:
    async def scenario() -> None:
        with pytest.raises(AssertionError, match=r"the moon not reached within 0\.05 s"):
            await until(lambda: False, 0.05, "the moon")
        with pytest.raises(AssertionError, match="an event not reached"):
            await until(asyncio.Event(), 0.05, "an event")

    run(scenario)
    with pytest.raises(AssertionError, match="the sun not reached"):
        wait_until(lambda: False, 0.05, "the sun")


def test_certificates_name_what_they_are_for() -> None:
    from cryptography import x509

    cert_pem, key_pem = self_signed("thrust-test", dns=["thrust.test"], ips=["127.0.0.1"], ca=True)
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["thrust.test"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert b"PRIVATE KEY" in key_pem

    ca = CertificateAuthority("test-ca")
    server_pem, _ = ca.issue("server", client=False, server_name="thrust.test")
    server = x509.load_pem_x509_certificate(server_pem)
    assert server.issuer == ca.cert.subject
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["thrust.test"]
