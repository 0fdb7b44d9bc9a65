"""Read-only forum pages: front page, forum list, thread lists, thread pages, profiles and search."""

from __future__ import annotations

from flask import Flask, g, redirect, render_template, request, url_for

from envs.forum import db
from envs.forum.web import get_db, require


def _page_arg() -> int:
    try:
        return max(1, int(request.args.get("page", "1")))
    except ValueError:
        return 1


def _sort_arg(default: str = "hot") -> str:
    sort = request.args.get("sort", default)
    return sort if sort in db.SORTS else default


def register(app: Flask) -> None:
    @app.get("/")
    def front_page():
        sort = _sort_arg()
        listing = db.list_threads(get_db(), sort=sort, page=_page_arg())
        return render_template("thread_list.html", heading="All forums", forum=None, listing=listing, sort=sort,
                               endpoint="front_page", endpoint_args={})

    @app.get("/forums")
    def forum_index():
        return render_template("forums.html", forums=db.list_forums(get_db()))

    @app.get("/f/<name>")
    def forum_page(name: str):
        forum = db.get_forum(get_db(), name)
        require(forum)
        sort = _sort_arg()
        listing = db.list_threads(get_db(), forum_id=forum["id"], sort=sort, page=_page_arg())
        return render_template("thread_list.html", heading=forum["title"], forum=forum, listing=listing, sort=sort,
                               endpoint="forum_page", endpoint_args={"name": name})

    @app.get("/f/<name>/<int:thread_id>")
    def thread_page(name: str, thread_id: int):
        conn = get_db()
        thread = db.get_thread(conn, thread_id)
        require(thread)
        if thread["forum_name"] != name:
            return redirect(url_for("thread_page", name=thread["forum_name"], thread_id=thread_id))
        uid = g.user["id"] if g.user is not None else None
        return render_template("thread.html", thread=thread, comments=db.comment_tree(conn, thread_id),
                               thread_vote=db.user_votes(conn, uid, "thread").get(thread_id, 0),
                               comment_votes=db.user_votes(conn, uid, "comment"))

    @app.get("/comment/<int:comment_id>")
    def comment_link(comment_id: int):
        comment = db.get_comment(get_db(), comment_id)
        require(comment)
        return redirect(url_for("thread_page", name=comment["forum_name"], thread_id=comment["thread_id"],
                                _anchor=f"comment-{comment_id}"))

    @app.get("/user/<username>")
    def user_page(username: str):
        conn = get_db()
        profile = db.get_user(conn, username=username)
        require(profile)
        listing = db.list_threads(conn, author_id=profile["id"], sort="new", page=_page_arg())
        return render_template("user.html", profile=profile, karma=db.karma(conn, profile["id"]), tab="threads",
                               listing=listing, endpoint="user_page", endpoint_args={"username": username})

    @app.get("/user/<username>/comments")
    def user_comments_page(username: str):
        conn = get_db()
        profile = db.get_user(conn, username=username)
        require(profile)
        listing = db.user_comments(conn, profile["id"], page=_page_arg())
        return render_template("user.html", profile=profile, karma=db.karma(conn, profile["id"]), tab="comments",
                               listing=listing, endpoint="user_comments_page", endpoint_args={"username": username})

    @app.get("/search")
    def search():
        conn = get_db()
        query = request.args.get("q", "").strip()
        forum_name = request.args.get("forum", "")
        forum = db.get_forum(conn, forum_name) if forum_name else None
        sort = _sort_arg("new")
        listing = None
        if query:
            listing = db.list_threads(conn, query=query, forum_id=forum["id"] if forum else None, sort=sort,
                                      page=_page_arg())
        return render_template("search.html", query=query, forum=forum, forums=db.list_forums(conn), sort=sort,
                               listing=listing, endpoint="search",
                               endpoint_args={"q": query, "forum": forum["name"] if forum else ""})
