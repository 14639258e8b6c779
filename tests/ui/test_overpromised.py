"""The quota page warns when the tree promises more than the member clusters hold."""

from __future__ import annotations

import re
from html import unescape

from tests.admin.conftest import YAML, Api
from tests.admin.test_quota_inventory import AUTO, GPU, auto_tree, dump
from tests.ui.test_pages import login


async def test_the_quota_page_shows_the_shortfall_and_the_auto_capacity(api: Api) -> None:
    await login(api, "admin")
    await api.call("PUT", "/api/v1/quota-tree", data=dump(AUTO), headers=YAML, status=200)
    await api.settle()
    html = unescape(await (await api.client.get("/ui/")).text())
    assert "promises more than the member clusters hold" not in html
    assert "Root capacity: auto" in html and "nvidia.com/gpu 48" in html

    greedy = auto_tree(platform={GPU: 24}, **{"team-c": {GPU: 24}})
    await api.call("PUT", "/api/v1/quota-tree", data=dump(greedy), headers=YAML, status=200)
    await api.settle()
    html = unescape(await (await api.client.get("/ui/")).text())
    assert "The quota tree promises more than the member clusters hold" in html
    row = html[html.index('data-resource="nvidia.com/gpu"') :]
    row = row[row.index(">") + 1 : row.index("</tr>")]
    assert re.sub(r"<[^>]+>", " ", row).split() == ["nvidia.com/gpu", "56", "48", "8"]
