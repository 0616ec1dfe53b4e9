pytest_plugins = ["mahjong_infra.pytest_plugin"]
