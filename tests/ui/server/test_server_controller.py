"""The Settings switch runs the local server on the app's own engine and model."""

from __future__ import annotations

import socket

import openai
import pytest

from app.core.settings import AppSettings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def switch(window, qtbot, enabled: bool, port: int) -> None:
    settings = window.settings_controller.settings.with_changes(
        server_enabled=enabled, server_port=port
    )
    with qtbot.waitSignal(window.server.status_changed, timeout=10_000):
        window.settings_controller.apply(settings)


def test_the_switch_serves_the_loaded_model_and_shows_where(window, qtbot):
    port = free_port()
    switch(window, qtbot, True, port)
    status = window.server.server.status()
    assert status.running and status.port == port
    label = window.status_area.server_status
    assert label.isVisible() and f":{port}" in label.full_text
    assert f"http://127.0.0.1:{port}/v1" in label.toolTip()

    client = openai.OpenAI(base_url=status.base_url, api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="swapless",
        messages=[{"role": "user", "content": "Hello from an editor."}],
        max_tokens=8,
        temperature=0,
    )
    assert reply.choices[0].message.content
    assert reply.usage.completion_tokens >= 1
    # The app's engine answered: the window's model is the one served.
    assert reply.model == window.models.info.folder.rsplit("/", 1)[-1]

    switch(window, qtbot, False, port)
    assert window.server.server is None and not label.isVisible()
    qtbot.waitUntil(lambda: _refused(port), timeout=10_000)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


def test_a_port_in_use_is_a_notice_in_words(window, qtbot):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        switch(window, qtbot, True, port)
    assert window.server.server is None
    notice = window.notices.notice("server")
    assert notice is not None and f"Port {port}" in notice.text
    assert "already in use" in notice.text


@pytest.mark.parametrize("port", [80, 70000])
def test_the_port_setting_is_checked(port):
    from app.core.errors import SettingsError

    with pytest.raises(SettingsError, match="server_port"):
        AppSettings().with_changes(server_port=port)


def test_an_enabled_server_starts_with_the_app_and_stops_with_it(
    make_window, qtbot, tiny_model_dir
):
    port = free_port()
    window = make_window(AppSettings(server_enabled=True, server_port=port))
    qtbot.waitUntil(
        lambda: (
            window.server.server is not None and window.server.server.status().running
        ),
        timeout=10_000,
    )
    window.close()
    assert _refused(port)
