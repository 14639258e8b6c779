"""The web dashboard served by ``fleet serve`` at ``/ui/`` (:func:`fleet.ui.app.setup`).

It reads and writes only through the public HTTP API (:mod:`fleet.ui.client`).
"""
