"""One thinking switch (#62): the window's Settings, a chat's own switch and the CLI's --no-thinking become the
same ChatOptions.enable_thinking, through runtime.engine.options.thinking_option only."""

from __future__ import annotations

import argparse

from app.settings import AppSettings
from commands.common import add_answer_flags, chat_options
from runtime.chat.conversation import Conversation
from runtime.engine.options import ChatOptions, thinking_option


def cli_thinking(*flags: str) -> bool | None:
    parser = argparse.ArgumentParser()
    add_answer_flags(parser)
    return chat_options(parser.parse_args(list(flags))).enable_thinking


def test_every_front_end_turns_the_switch_into_the_same_option() -> None:
    assert (thinking_option(True), thinking_option(False)) == (None, False)  # on: the template's own default
    for on in (True, False):
        window = AppSettings(thinking=on).chat_options().enable_thinking
        chat = Conversation(options=ChatOptions(enable_thinking=True), thinking=on).turn_options().enable_thinking
        cli = cli_thinking() if on else cli_thinking("--no-thinking")
        assert window == chat == cli == thinking_option(on), (on, window, chat, cli)
    # A chat without its own switch keeps what the options say (an API client's explicit True included).
    assert Conversation(options=ChatOptions(enable_thinking=True)).turn_options().enable_thinking is True
